//! The command table (names, arity, flags, key positions: what COMMAND
//! reports) and the parsing of data commands' arguments into [`Op`]s.

use roost_bcounter::Bound;

use std::sync::{Arc, OnceLock};

use crate::expiry::{
    parse_deadline, parse_expire_cond, parse_expire_time, parse_string_options, ExpireOp, GetExTtl,
    SetTtl, TimeCommand,
};
use crate::functions::Functions;
use crate::keyspace::{KeyOp, ObjectSub, ScanArgs};
use crate::protocol::Frame;
use crate::store::{parse_i64, Op, SetCond, MAX_KEY_BYTES, MAX_VALUE_BYTES, NOT_INTEGER};
use crate::strings::{self, BitOpKind, StrOp};
use crate::{hashes, lists, sets, sort, zsets};

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
        "Sets the string value of a key (NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL).",
    ),
    data("del", -2, true, (1, -1, 1), "Deletes keys."),
    data("unlink", -2, true, (1, -1, 1), "Deletes keys."),
    data(
        "exists",
        -2,
        false,
        (1, -1, 1),
        "Counts the keys that exist.",
    ),
    data(
        "touch",
        -2,
        false,
        (1, -1, 1),
        "Counts the keys that exist (access times are not tracked).",
    ),
    data("type", 2, false, (1, 1, 1), "Returns the type of a key."),
    data("rename", 3, true, (1, 2, 1), "Renames a key."),
    data(
        "renamenx",
        3,
        true,
        (1, 2, 1),
        "Renames a key if the new name is free.",
    ),
    data(
        "copy",
        -3,
        true,
        (1, 2, 1),
        "Copies a key's value and time to live (DB 0 only, REPLACE).",
    ),
    data(
        "keys",
        2,
        false,
        (0, 0, 0),
        "Returns the keys that match a pattern (one transaction; use SCAN for large keyspaces).",
    ),
    data(
        "scan",
        -2,
        false,
        (0, 0, 0),
        "Iterates over the keys (MATCH, COUNT, TYPE).",
    ),
    data("randomkey", 1, false, (0, 0, 0), "Returns a random key."),
    data("dbsize", 1, false, (0, 0, 0), "Returns the number of keys."),
    data(
        "flushdb",
        -1,
        true,
        (0, 0, 0),
        "Deletes every key (ASYNC and SYNC alike).",
    ),
    data(
        "flushall",
        -1,
        true,
        (0, 0, 0),
        "Deletes every key (ASYNC and SYNC alike).",
    ),
    data(
        "object",
        -2,
        false,
        (2, 2, 1),
        "OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT|HELP.",
    ),
    data(
        "memory",
        -2,
        false,
        (2, 2, 1),
        "MEMORY USAGE key [SAMPLES n] (an estimate)|DOCTOR|PURGE|HELP.",
    ),
    data(
        "expire",
        -3,
        true,
        (1, 1, 1),
        "Sets a time to live in seconds (NX, XX, GT, LT).",
    ),
    data(
        "pexpire",
        -3,
        true,
        (1, 1, 1),
        "Sets a time to live in milliseconds (NX, XX, GT, LT).",
    ),
    data(
        "expireat",
        -3,
        true,
        (1, 1, 1),
        "Sets a deadline as a Unix time in seconds (NX, XX, GT, LT).",
    ),
    data(
        "pexpireat",
        -3,
        true,
        (1, 1, 1),
        "Sets a deadline as a Unix time in milliseconds (NX, XX, GT, LT).",
    ),
    data(
        "ttl",
        2,
        false,
        (1, 1, 1),
        "Returns the time to live in seconds.",
    ),
    data(
        "pttl",
        2,
        false,
        (1, 1, 1),
        "Returns the time to live in milliseconds.",
    ),
    data(
        "expiretime",
        2,
        false,
        (1, 1, 1),
        "Returns the deadline as a Unix time in seconds.",
    ),
    data(
        "pexpiretime",
        2,
        false,
        (1, 1, 1),
        "Returns the deadline as a Unix time in milliseconds.",
    ),
    data("persist", 2, true, (1, 1, 1), "Removes the time to live."),
    data(
        "setex",
        4,
        true,
        (1, 1, 1),
        "Sets a value with a time to live in seconds.",
    ),
    data(
        "psetex",
        4,
        true,
        (1, 1, 1),
        "Sets a value with a time to live in milliseconds.",
    ),
    data(
        "getex",
        -2,
        true,
        (1, 1, 1),
        "Returns a value and sets or removes its time to live.",
    ),
    data(
        "setnx",
        3,
        true,
        (1, 1, 1),
        "Sets a value if the key does not exist.",
    ),
    data(
        "getset",
        3,
        true,
        (1, 1, 1),
        "Sets a value and returns the old one.",
    ),
    data(
        "getdel",
        2,
        true,
        (1, 1, 1),
        "Returns a value and deletes the key.",
    ),
    data("append", 3, true, (1, 1, 1), "Appends to a string."),
    data(
        "strlen",
        2,
        false,
        (1, 1, 1),
        "Returns the length of a string.",
    ),
    data(
        "getrange",
        4,
        false,
        (1, 1, 1),
        "Returns a substring.",
    ),
    data("substr", 4, false, (1, 1, 1), "Returns a substring."),
    data(
        "setrange",
        4,
        true,
        (1, 1, 1),
        "Overwrites part of a string.",
    ),
    data(
        "msetnx",
        -3,
        true,
        (1, -1, 2),
        "Sets several keys if none exists, atomically.",
    ),
    data(
        "incrbyfloat",
        3,
        true,
        (1, 1, 1),
        "Increments a number by a decimal.",
    ),
    data("setbit", 4, true, (1, 1, 1), "Sets or clears a bit."),
    data("getbit", 3, false, (1, 1, 1), "Returns a bit."),
    data(
        "bitcount",
        -2,
        false,
        (1, 1, 1),
        "Counts set bits (BYTE, BIT ranges).",
    ),
    data(
        "bitpos",
        -3,
        false,
        (1, 1, 1),
        "Finds the first set or clear bit.",
    ),
    data(
        "bitop",
        -4,
        true,
        (2, -1, 1),
        "AND, OR, XOR, NOT of strings into a key.",
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
    data(
        "lpop",
        -2,
        true,
        (1, 1, 1),
        "Removes and returns the first elements of a list (count).",
    ),
    data(
        "rpop",
        -2,
        true,
        (1, 1, 1),
        "Removes and returns the last elements of a list (count).",
    ),
    data(
        "lindex",
        3,
        false,
        (1, 1, 1),
        "Returns an element of a list by its index.",
    ),
    data(
        "lset",
        4,
        true,
        (1, 1, 1),
        "Sets an element of a list by its index.",
    ),
    data(
        "linsert",
        5,
        true,
        (1, 1, 1),
        "Inserts an element before or after another in a list.",
    ),
    data(
        "lrem",
        4,
        true,
        (1, 1, 1),
        "Removes elements equal to a value from a list.",
    ),
    data(
        "ltrim",
        4,
        true,
        (1, 1, 1),
        "Trims a list to a range of indexes.",
    ),
    data(
        "lpos",
        -3,
        false,
        (1, 1, 1),
        "Returns the indexes of matching elements of a list (RANK, COUNT, MAXLEN).",
    ),
    data(
        "lpushx",
        -3,
        true,
        (1, 1, 1),
        "Prepends elements to a list only if it exists.",
    ),
    data(
        "rpushx",
        -3,
        true,
        (1, 1, 1),
        "Appends elements to a list only if it exists.",
    ),
    data(
        "lmove",
        5,
        true,
        (1, 2, 1),
        "Pops an element from one end of a list and pushes it onto another list.",
    ),
    data(
        "rpoplpush",
        3,
        true,
        (1, 2, 1),
        "Pops the last element of a list and pushes it onto the head of another.",
    ),
    // Keys are named after `numkeys` (Redis: first key 0, `movablekeys`).
    data(
        "lmpop",
        -4,
        true,
        (0, 0, 0),
        "Pops elements from the first non-empty list (LEFT|RIGHT, COUNT).",
    ),
    // The blocking forms wait (outside MULTI) by re-running the pop.
    data(
        "blpop",
        -3,
        true,
        (1, -2, 1),
        "Pops the first element of the first non-empty list, waiting for one.",
    ),
    data(
        "brpop",
        -3,
        true,
        (1, -2, 1),
        "Pops the last element of the first non-empty list, waiting for one.",
    ),
    data(
        "blmove",
        6,
        true,
        (1, 2, 1),
        "LMOVE, waiting for an element.",
    ),
    data(
        "brpoplpush",
        4,
        true,
        (1, 2, 1),
        "RPOPLPUSH, waiting for an element.",
    ),
    data(
        "blmpop",
        -5,
        true,
        (0, 0, 0),
        "LMPOP, waiting for an element.",
    ),
    data("hget", 3, false, (1, 1, 1), "Returns a field of a hash."),
    data("hset", -4, true, (1, 1, 1), "Sets fields of a hash."),
    data(
        "hsetnx",
        4,
        true,
        (1, 1, 1),
        "Sets a field of a hash only if it is not there.",
    ),
    data(
        "hmset",
        -4,
        true,
        (1, 1, 1),
        "Sets fields of a hash (replies OK).",
    ),
    data("hmget", -3, false, (1, 1, 1), "Returns fields of a hash."),
    data(
        "hgetall",
        2,
        false,
        (1, 1, 1),
        "Returns all fields and values of a hash.",
    ),
    data("hdel", -3, true, (1, 1, 1), "Deletes fields of a hash."),
    data(
        "hlen",
        2,
        false,
        (1, 1, 1),
        "Returns the number of fields of a hash.",
    ),
    data(
        "hexists",
        3,
        false,
        (1, 1, 1),
        "Whether a field is in a hash.",
    ),
    data("hkeys", 2, false, (1, 1, 1), "Returns the fields of a hash."),
    data("hvals", 2, false, (1, 1, 1), "Returns the values of a hash."),
    data(
        "hstrlen",
        3,
        false,
        (1, 1, 1),
        "Returns the length of a field's value.",
    ),
    data(
        "hincrby",
        4,
        true,
        (1, 1, 1),
        "Increments the integer value of a field.",
    ),
    data(
        "hincrbyfloat",
        4,
        true,
        (1, 1, 1),
        "Increments the float value of a field.",
    ),
    data(
        "hrandfield",
        -2,
        false,
        (1, 1, 1),
        "Returns random fields of a hash (WITHVALUES; a negative count may repeat them).",
    ),
    data(
        "hscan",
        -3,
        false,
        (1, 1, 1),
        "Iterates over the fields and values of a hash.",
    ),
    data("sadd", -3, true, (1, 1, 1), "Adds members to a set."),
    data("srem", -3, true, (1, 1, 1), "Removes members from a set."),
    data("smembers", 2, false, (1, 1, 1), "Returns every member of a set."),
    data(
        "sismember",
        3,
        false,
        (1, 1, 1),
        "Whether a value is a member of a set.",
    ),
    data(
        "smismember",
        -3,
        false,
        (1, 1, 1),
        "Whether each value is a member of a set.",
    ),
    data("scard", 2, false, (1, 1, 1), "Returns the size of a set."),
    data(
        "spop",
        -2,
        true,
        (1, 1, 1),
        "Removes and returns random members of a set.",
    ),
    data(
        "srandmember",
        -2,
        false,
        (1, 1, 1),
        "Returns random members of a set (a negative count may repeat them).",
    ),
    // BY and GET read keys their patterns name, inside the same transaction.
    data(
        "sort",
        -2,
        true,
        (1, 1, 1),
        "Sorts a list, set or sorted set (BY, LIMIT, GET, ASC|DESC, ALPHA, STORE).",
    ),
    data(
        "sort_ro",
        -2,
        false,
        (1, 1, 1),
        "Sorts a list, set or sorted set (BY, LIMIT, GET, ASC|DESC, ALPHA).",
    ),
    data("sinter", -2, false, (1, -1, 1), "Intersects sets."),
    data("sunion", -2, false, (1, -1, 1), "Unites sets."),
    data("sdiff", -2, false, (1, -1, 1), "Subtracts sets from the first."),
    data(
        "sinterstore",
        -3,
        true,
        (1, -1, 1),
        "Stores the intersection of sets.",
    ),
    data(
        "sunionstore",
        -3,
        true,
        (1, -1, 1),
        "Stores the union of sets.",
    ),
    data(
        "sdiffstore",
        -3,
        true,
        (1, -1, 1),
        "Stores the difference of sets.",
    ),
    // Keys are named after `numkeys` (Redis: first key 0, `movablekeys`).
    data(
        "sintercard",
        -3,
        false,
        (0, 0, 0),
        "Counts the intersection of sets (LIMIT).",
    ),
    data(
        "smove",
        4,
        true,
        (1, 2, 1),
        "Moves a member from one set to another.",
    ),
    data(
        "sscan",
        -3,
        false,
        (1, 1, 1),
        "Iterates over a set's members (MATCH, COUNT).",
    ),
    data(
        "zadd",
        -4,
        true,
        (1, 1, 1),
        "Adds members to a sorted set or updates their scores (NX, XX, GT, LT, CH, INCR).",
    ),
    data(
        "zincrby",
        4,
        true,
        (1, 1, 1),
        "Increments a member's score.",
    ),
    data("zscore", 3, false, (1, 1, 1), "Returns a member's score."),
    data(
        "zrandmember",
        -2,
        false,
        (1, 1, 1),
        "Returns random members of a sorted set (WITHSCORES; a negative count may repeat them).",
    ),
    data("zmscore", -3, false, (1, 1, 1), "Returns members' scores."),
    data(
        "zcard",
        2,
        false,
        (1, 1, 1),
        "Returns the size of a sorted set.",
    ),
    data(
        "zrange",
        -4,
        false,
        (1, 1, 1),
        "Returns a range of a sorted set (BYSCORE, BYLEX, REV, LIMIT, WITHSCORES).",
    ),
    data(
        "zrangestore",
        -5,
        true,
        (1, 2, 1),
        "Stores a range of a sorted set.",
    ),
    data(
        "zrangebyscore",
        -4,
        false,
        (1, 1, 1),
        "Returns members by score (WITHSCORES, LIMIT).",
    ),
    data(
        "zrevrangebyscore",
        -4,
        false,
        (1, 1, 1),
        "Returns members by score, highest first (WITHSCORES, LIMIT).",
    ),
    data(
        "zrevrange",
        -4,
        false,
        (1, 1, 1),
        "Returns members by rank, highest first (WITHSCORES).",
    ),
    data(
        "zrangebylex",
        -4,
        false,
        (1, 1, 1),
        "Returns members by lexicographic range (LIMIT).",
    ),
    data(
        "zrevrangebylex",
        -4,
        false,
        (1, 1, 1),
        "Returns members by lexicographic range, highest first (LIMIT).",
    ),
    data(
        "zrank",
        -3,
        false,
        (1, 1, 1),
        "Returns a member's rank (WITHSCORE).",
    ),
    data(
        "zrevrank",
        -3,
        false,
        (1, 1, 1),
        "Returns a member's rank, highest first (WITHSCORE).",
    ),
    data(
        "zrem",
        -3,
        true,
        (1, 1, 1),
        "Removes members from a sorted set.",
    ),
    data(
        "zremrangebyrank",
        4,
        true,
        (1, 1, 1),
        "Removes members by rank.",
    ),
    data(
        "zremrangebyscore",
        4,
        true,
        (1, 1, 1),
        "Removes members by score.",
    ),
    data(
        "zremrangebylex",
        4,
        true,
        (1, 1, 1),
        "Removes members by lexicographic range.",
    ),
    data(
        "zcount",
        4,
        false,
        (1, 1, 1),
        "Counts members in a range of scores.",
    ),
    data(
        "zlexcount",
        4,
        false,
        (1, 1, 1),
        "Counts members in a lexicographic range.",
    ),
    data(
        "zpopmin",
        -2,
        true,
        (1, 1, 1),
        "Removes and returns the lowest-scored members.",
    ),
    data(
        "zpopmax",
        -2,
        true,
        (1, 1, 1),
        "Removes and returns the highest-scored members.",
    ),
    data(
        "zunion",
        -3,
        false,
        (0, 0, 0),
        "Unites sorted sets (WEIGHTS, AGGREGATE, WITHSCORES).",
    ),
    data(
        "zinter",
        -3,
        false,
        (0, 0, 0),
        "Intersects sorted sets (WEIGHTS, AGGREGATE, WITHSCORES).",
    ),
    data(
        "zmpop",
        -4,
        true,
        (0, 0, 0),
        "Pops the lowest or highest members of the first sorted set that has some (COUNT).",
    ),
    // The blocking forms wait (outside MULTI) by re-running the pop.
    data(
        "bzpopmin",
        -3,
        true,
        (1, -2, 1),
        "Pops the lowest member of the first non-empty sorted set, waiting for one.",
    ),
    data(
        "bzpopmax",
        -3,
        true,
        (1, -2, 1),
        "Pops the highest member of the first non-empty sorted set, waiting for one.",
    ),
    data(
        "bzmpop",
        -5,
        true,
        (0, 0, 0),
        "ZMPOP, waiting for a member.",
    ),
    data(
        "zintercard",
        -3,
        false,
        (0, 0, 0),
        "Counts the intersection of sorted sets (LIMIT).",
    ),
    data(
        "zdiff",
        -3,
        false,
        (0, 0, 0),
        "Subtracts sorted sets from the first (WITHSCORES).",
    ),
    data(
        "zunionstore",
        -4,
        true,
        (1, 1, 1),
        "Stores the union of sorted sets (WEIGHTS, AGGREGATE).",
    ),
    data(
        "zinterstore",
        -4,
        true,
        (1, 1, 1),
        "Stores the intersection of sorted sets (WEIGHTS, AGGREGATE).",
    ),
    data(
        "zdiffstore",
        -4,
        true,
        (1, 1, 1),
        "Stores the difference of sorted sets.",
    ),
    data(
        "zscan",
        -3,
        false,
        (1, 1, 1),
        "Iterates over a sorted set's members and scores (MATCH, COUNT).",
    ),
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
    data(
        "eval",
        -3,
        true,
        (0, 0, 0),
        "EVAL script numkeys key... arg...: runs a Lua script, one transaction over its keys.",
    ),
    data(
        "evalsha",
        -3,
        true,
        (0, 0, 0),
        "EVALSHA sha1 numkeys key... arg...: runs a cached Lua script.",
    ),
    data(
        "eval_ro",
        -3,
        false,
        (0, 0, 0),
        "EVAL_RO script numkeys key... arg...: runs a read-only Lua script.",
    ),
    data(
        "evalsha_ro",
        -3,
        false,
        (0, 0, 0),
        "EVALSHA_RO sha1 numkeys key... arg...: runs a cached read-only Lua script.",
    ),
    conn(
        "function",
        -2,
        false,
        "FUNCTION LOAD|DELETE|FLUSH|LIST|HELP: Lua libraries beside the registered functions.",
    ),
    conn(
        "script",
        -2,
        false,
        "SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP: the Lua script cache.",
    ),
    conn("ping", -1, false, "Returns PONG or the argument."),
    conn("echo", 2, false, "Returns the argument."),
    conn(
        "roost.owner",
        -2,
        false,
        "ROOST.OWNER key...: each key's keyspace reactor, its owner node and that node's RESP address (nil where this node does not know).",
    ),
    conn("time", 1, false, "Returns the server's time."),
    conn(
        "save",
        1,
        false,
        "Refused: every node logs its writes and checkpoints in the background (roost node --sync).",
    ),
    conn(
        "bgsave",
        -1,
        false,
        "Refused: every node logs its writes and checkpoints in the background (roost node --sync).",
    ),
    conn(
        "shutdown",
        -1,
        false,
        "Refused: a node stops on SIGTERM (roost up stops its nodes).",
    ),
    conn("select", 2, false, "Selects a database (only 0 exists)."),
    conn(
        "client",
        -2,
        false,
        "CLIENT ID|INFO|LIST|SETNAME|GETNAME|SETINFO|NO-EVICT|HELP.",
    ),
    conn("info", -1, false, "Server information and statistics."),
    conn(
        "command",
        -1,
        false,
        "Information about commands (COUNT, INFO, DOCS, LIST, GETKEYS).",
    ),
    conn(
        "config",
        -2,
        false,
        "CONFIG GET/SET of Roost's parameters, RESETSTAT, HELP.",
    ),
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
];

pub(crate) fn lookup(name: &[u8]) -> Option<&'static Spec> {
    lookup_index(name).map(|i| &COMMANDS[i])
}

/// The command's index in [`COMMANDS`]: among the commands of the same
/// first letter (a few), in table order, so the hot ones come first.
pub(crate) fn lookup_index(name: &[u8]) -> Option<usize> {
    static BY_FIRST_BYTE: OnceLock<Vec<Vec<u16>>> = OnceLock::new();
    let buckets = BY_FIRST_BYTE.get_or_init(|| {
        let mut buckets = vec![Vec::new(); 256];
        for (i, spec) in COMMANDS.iter().enumerate() {
            let first = spec.name.as_bytes()[0].to_ascii_lowercase();
            buckets[first as usize].push(u16::try_from(i).expect("a small table"));
        }
        buckets
    });
    let first = name.first()?.to_ascii_lowercase();
    buckets[first as usize]
        .iter()
        .map(|&i| usize::from(i))
        .find(|&i| COMMANDS[i].name.as_bytes().eq_ignore_ascii_case(name))
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

/// The commands that name their keys after a `numkeys` argument (COMMAND's
/// `movablekeys`): where that argument is (the name at 0).
pub(crate) fn numkeys_at(name: &str) -> Option<usize> {
    match name {
        "fcall" | "fcall_ro" | "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "zunionstore"
        | "zinterstore" | "zdiffstore" | "blmpop" | "bzmpop" => Some(2),
        "sintercard" | "zintercard" | "zunion" | "zinter" | "zdiff" | "zmpop" | "lmpop" => Some(1),
        _ => None,
    }
}

pub(crate) fn wrong_arity(name: &str) -> Frame {
    Frame::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

pub(crate) fn syntax_error() -> Frame {
    Frame::error("ERR syntax error")
}

pub(crate) fn check_key(key: &[u8]) -> Result<(), Frame> {
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

pub(crate) fn check_value(value: &[u8]) -> Result<(), Frame> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Frame::error(format!(
            "ERR value exceeds the maximum allowed size ({MAX_VALUE_BYTES} bytes)"
        )));
    }
    Ok(())
}

pub(crate) fn integer(arg: &[u8]) -> Result<i64, Frame> {
    parse_i64(arg).ok_or_else(|| Frame::error(NOT_INTEGER))
}

/// The data command `spec` with `args` (arity already checked) as an [`Op`];
/// a bad argument becomes [`Op::Reply`] with Redis's error text, answered
/// when the command runs (inside MULTI: at EXEC, in its place).
/// The arguments are moved into the `Op`, not copied.
pub(crate) fn parse_op(spec: &Spec, mut args: Vec<Vec<u8>>, functions: &Functions) -> Op {
    if let "eval" | "evalsha" | "eval_ro" | "evalsha_ro" = spec.name {
        return crate::scripting::parse_eval(functions, spec.name, args);
    }
    if let "fcall" | "fcall_ro" = spec.name {
        let read_only = spec.name == "fcall_ro";
        if let Some(op) = crate::scripting::parse_fcall(functions, read_only, &mut args) {
            return op;
        }
        return match functions.parse_call(spec.name == "fcall_ro", &mut args) {
            Ok(call) => Op::FCall(std::sync::Arc::new(call)),
            Err(error) => Op::Reply(error),
        };
    }
    parse_op_checked(spec, &mut args).unwrap_or_else(Op::Reply)
}

/// Moves argument `i` out (it is left empty).
pub(crate) fn take(a: &mut [Vec<u8>], i: usize) -> Vec<u8> {
    std::mem::take(&mut a[i])
}

pub(crate) fn take_all(a: &mut [Vec<u8>]) -> Vec<Vec<u8>> {
    a.iter_mut().map(std::mem::take).collect()
}

fn parse_op_checked(spec: &Spec, args: &mut [Vec<u8>]) -> Result<Op, Frame> {
    let a = &mut args[1..];
    if spec.first_key > 0 {
        // `a` is the arguments after the name: argument `i` is `a[i - 1]`,
        // and a negative last key counts from the end (-1 the last).
        let last = if spec.last_key < 0 {
            usize::try_from(a.len() as i64 + 1 + i64::from(spec.last_key)).unwrap_or(0)
        } else {
            spec.last_key as usize
        };
        let mut i = spec.first_key as usize;
        while i <= last && i <= a.len() {
            check_key(&a[i - 1])?;
            i += spec.step.max(1) as usize;
        }
    }
    if let Some(op) = hashes::parse(spec.name, a)
        .or_else(|| sets::parse(spec.name, a))
        .or_else(|| zsets::parse(spec.name, a))
        .or_else(|| lists::parse(spec.name, a))
        .or_else(|| sort::parse(spec.name, a))
    {
        return op;
    }
    Ok(match spec.name {
        "get" => Op::Get(take(a, 0)),
        "set" => parse_set(a)?,
        "setex" => parse_setex(a, false, TimeCommand::SetEx)?,
        "psetex" => parse_setex(a, true, TimeCommand::PSetEx)?,
        "getset" => {
            check_value(&a[1])?;
            Op::Set {
                key: take(a, 0),
                value: take(a, 1).into_boxed_slice(),
                cond: SetCond::Always,
                get: true,
                ttl: SetTtl::Clear,
            }
        }
        "del" | "unlink" => Op::Del(take_all(a)),
        "exists" | "touch" => Op::Exists(take_all(a)),
        "type" => Op::Key(KeyOp::Type(take(a, 0))),
        "rename" | "renamenx" => Op::Key(KeyOp::Rename {
            src: take(a, 0),
            dst: take(a, 1),
            nx: spec.name == "renamenx",
        }),
        "copy" => parse_copy(a)?,
        "keys" => Op::Key(KeyOp::Keys(Arc::new(take(a, 0)))),
        "scan" => parse_scan(a)?,
        "randomkey" => Op::Key(KeyOp::RandomKey),
        "dbsize" => Op::Key(KeyOp::DbSize),
        "flushdb" | "flushall" => parse_flush(a)?,
        "object" => parse_object(a)?,
        "memory" => parse_memory(a)?,
        "expire" => parse_expire(a, TimeCommand::Expire)?,
        "pexpire" => parse_expire(a, TimeCommand::PExpire)?,
        "expireat" => parse_expire(a, TimeCommand::ExpireAt)?,
        "pexpireat" => parse_expire(a, TimeCommand::PExpireAt)?,
        "ttl" | "pttl" | "expiretime" | "pexpiretime" => Op::Expire(ExpireOp::Ttl {
            key: take(a, 0),
            in_ms: spec.name.starts_with('p'),
            absolute: spec.name.ends_with("time"),
        }),
        "persist" => Op::Expire(ExpireOp::Persist(take(a, 0))),
        "getex" => parse_getex(a)?,
        "setnx" => {
            check_value(&a[1])?;
            Op::Str(StrOp::SetNx {
                key: take(a, 0),
                value: take(a, 1),
            })
        }
        "getdel" => Op::Str(StrOp::GetDel(take(a, 0))),
        "append" => {
            check_value(&a[1])?;
            Op::Str(StrOp::Append {
                key: take(a, 0),
                value: take(a, 1),
            })
        }
        "strlen" => Op::Str(StrOp::StrLen(take(a, 0))),
        "getrange" | "substr" => Op::Str(StrOp::GetRange {
            start: integer(&a[1])?,
            end: integer(&a[2])?,
            key: take(a, 0),
        }),
        "setrange" => {
            let offset = integer(&a[1])?;
            if offset < 0 {
                return Err(Frame::error("ERR offset is out of range"));
            }
            // Past the largest string: refused when it runs (after the
            // key's type, as Redis checks).
            let offset = u32::try_from(offset).unwrap_or(u32::MAX);
            check_value(&a[2])?;
            Op::Str(StrOp::SetRange {
                key: take(a, 0),
                offset,
                value: take(a, 2),
            })
        }
        "msetnx" => Op::Str(StrOp::MSetNx(parse_pairs(a, "msetnx")?)),
        "incrbyfloat" => Op::Str(StrOp::IncrByFloat {
            key: take(a, 0),
            incr: take(a, 1),
        }),
        "setbit" => {
            let offset = strings::parse_bit_offset(&a[1], MAX_VALUE_BYTES as u64)?;
            let bit = match parse_i64(&a[2]) {
                Some(0) => false,
                Some(1) => true,
                _ => return Err(Frame::error(strings::NOT_A_BIT)),
            };
            Op::Str(StrOp::SetBit {
                key: take(a, 0),
                offset: offset as usize,
                bit,
            })
        }
        "getbit" => Op::Str(StrOp::GetBit {
            offset: strings::parse_bit_offset(&a[1], strings::getbit_max_bytes())?,
            key: take(a, 0),
        }),
        "bitcount" => Op::Str(StrOp::BitCount {
            key: take(a, 0),
            range: take_all(&mut a[1..]),
        }),
        "bitpos" => {
            let bit = match integer(&a[1])? {
                0 => false,
                1 => true,
                _ => return Err(Frame::error("ERR The bit argument must be 1 or 0.")),
            };
            Op::Str(StrOp::BitPos {
                key: take(a, 0),
                bit,
                range: take_all(&mut a[2..]),
            })
        }
        "bitop" => parse_bitop(a)?,
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
        "mset" => Op::MSet(parse_pairs(a, "mset")?),
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
    let (cond, get, ttl) = {
        let options = parse_string_options(&a[2..], true)?;
        let cond = match (options.nx, options.xx) {
            (true, _) => SetCond::IfAbsent,
            (_, true) => SetCond::IfPresent,
            _ => SetCond::Always,
        };
        let ttl = match options.expire {
            Some((arg, in_ms, relative)) => {
                SetTtl::At(parse_deadline(arg, in_ms, relative, TimeCommand::Set)?)
            }
            None if options.keepttl => SetTtl::Keep,
            None => SetTtl::Clear,
        };
        (cond, options.get, ttl)
    };
    Ok(Op::Set {
        key: take(a, 0),
        value: take(a, 1).into_boxed_slice(),
        cond,
        get,
        ttl,
    })
}

/// SETEX/PSETEX key time value.
fn parse_setex(a: &mut [Vec<u8>], in_ms: bool, command: TimeCommand) -> Result<Op, Frame> {
    let deadline = parse_deadline(&a[1], in_ms, true, command)?;
    check_value(&a[2])?;
    Ok(Op::Set {
        key: take(a, 0),
        value: take(a, 2).into_boxed_slice(),
        cond: SetCond::Always,
        get: false,
        ttl: SetTtl::At(deadline),
    })
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: options first, then the time (as
/// Redis checks them).
fn parse_expire(a: &mut [Vec<u8>], command: TimeCommand) -> Result<Op, Frame> {
    let cond = parse_expire_cond(&a[2..])?;
    let in_ms = command.name().starts_with('p');
    let ms = parse_expire_time(&a[1], in_ms, command)?;
    Ok(Op::Expire(ExpireOp::Expire {
        key: take(a, 0),
        ms,
        relative: !command.name().ends_with("at"),
        cond,
        command,
    }))
}

fn parse_getex(a: &mut [Vec<u8>]) -> Result<Op, Frame> {
    let options = parse_string_options(&a[1..], false)?;
    let ttl = match options.expire {
        Some((arg, in_ms, relative)) => GetExTtl::Set {
            arg: arg.to_vec(),
            in_ms,
            relative,
        },
        None if options.persist => GetExTtl::Persist,
        None => GetExTtl::Leave,
    };
    Ok(Op::Expire(ExpireOp::GetEx {
        key: take(a, 0),
        ttl,
    }))
}

/// COPY source destination [DB destination-db] [REPLACE].
fn parse_copy(a: &mut [Vec<u8>]) -> Result<Op, Frame> {
    let mut replace = false;
    let mut i = 2;
    while i < a.len() {
        if a[i].eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if a[i].eq_ignore_ascii_case(b"db") && i + 1 < a.len() {
            let db = parse_i64(&a[i + 1])
                .filter(|db| i32::try_from(*db).is_ok())
                .ok_or_else(|| Frame::error(NOT_INTEGER))?;
            if db != 0 {
                return Err(Frame::error("ERR DB index is out of range"));
            }
            i += 1;
        } else {
            return Err(syntax_error());
        }
        i += 1;
    }
    if a[0] == a[1] {
        return Err(Frame::error(
            "ERR source and destination objects are the same",
        ));
    }
    Ok(Op::Key(KeyOp::Copy {
        src: take(a, 0),
        dst: take(a, 1),
        replace,
    }))
}

/// A SCAN cursor as Redis's `strtoul` reads it: an optional sign (`-`
/// wraps, as in C) and decimal digits, nothing else.
pub(crate) fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let (negative, digits) = match arg.first() {
        Some(b'-') => (true, &arg[1..]),
        Some(b'+') => (false, &arg[1..]),
        _ => (false, arg),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if negative { n.wrapping_neg() } else { n })
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type].
fn parse_scan(a: &mut [Vec<u8>]) -> Result<Op, Frame> {
    let cursor = parse_cursor(&a[0]).ok_or_else(|| Frame::error("ERR invalid cursor"))?;
    let mut args = ScanArgs {
        cursor,
        pattern: None,
        count: 10,
        kind: None,
    };
    let mut i = 1;
    while i < a.len() {
        let has_value = i + 1 < a.len();
        let option = a[i].to_ascii_lowercase();
        match option.as_slice() {
            b"count" if has_value => {
                let count = integer(&a[i + 1])?;
                if count < 1 {
                    return Err(syntax_error());
                }
                args.count = usize::try_from(count).unwrap_or(usize::MAX);
            }
            b"match" if has_value => {
                let pattern = take(a, i + 1);
                args.pattern = (pattern.as_slice() != b"*").then(|| Arc::new(pattern));
            }
            b"type" if has_value => args.kind = Some(Arc::new(take(a, i + 1))),
            _ => return Err(syntax_error()),
        }
        i += 2;
    }
    Ok(Op::Key(KeyOp::Scan(args)))
}

/// FLUSHALL/FLUSHDB [ASYNC|SYNC].
fn parse_flush(a: &[Vec<u8>]) -> Result<Op, Frame> {
    match a {
        [] => {}
        [mode] if mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync") => {}
        _ => return Err(syntax_error()),
    }
    Ok(Op::Key(KeyOp::Flush))
}

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
];

/// MEMORY: USAGE (Roost's estimate, see [`KeyOp::MemoryUsage`]), DOCTOR,
/// PURGE (nothing to purge: OK) and HELP, with Redis 7.0's errors and
/// order of checks (SAMPLES' count before the key is looked at).
fn parse_memory(a: &mut [Vec<u8>]) -> Result<Op, Frame> {
    let name = a[0].to_ascii_lowercase();
    match name.as_slice() {
        b"usage" if a.len() >= 2 => {
            let mut rest = &a[2..];
            while let [option, tail @ ..] = rest {
                match tail {
                    [count, more @ ..] if option.eq_ignore_ascii_case(b"samples") => {
                        integer(count)?;
                        rest = more;
                    }
                    _ => return Err(syntax_error()),
                }
            }
            Ok(Op::Key(KeyOp::MemoryUsage(take(a, 1))))
        }
        b"doctor" if a.len() == 1 => Ok(Op::Reply(Frame::Verbatim {
            format: *b"txt",
            text: b"Hi Sam, I can't find any memory issue in your instance. I can only account \
for what occurs on this base."
                .to_vec(),
        })),
        b"purge" if a.len() == 1 => Ok(Op::Reply(Frame::ok())),
        b"help" if a.len() == 1 => Ok(Op::Reply(help(MEMORY_HELP))),
        b"usage" | b"doctor" | b"purge" | b"help" => Err(wrong_subcommand_arity("memory", &a[0])),
        _ => Err(unknown_subcommand("memory", &a[0])),
    }
}

/// Redis's help reply: its lines as simple strings.
pub(crate) fn help(lines: &[&str]) -> Frame {
    Frame::Array(lines.iter().map(|l| Frame::Simple((*l).into())).collect())
}

/// The wrong-arity error of a subcommand (`'object|encoding'`).
pub(crate) fn wrong_subcommand_arity(command: &str, sub: &[u8]) -> Frame {
    Frame::error(format!(
        "ERR wrong number of arguments for '{command}|{}' command",
        String::from_utf8_lossy(sub).to_ascii_lowercase()
    ))
}

/// Redis's unknown-subcommand error.
pub(crate) fn unknown_subcommand(command: &str, sub: &[u8]) -> Frame {
    Frame::error(format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        String::from_utf8_lossy(&sub[..sub.len().min(128)]),
        command.to_ascii_uppercase()
    ))
}

fn parse_object(a: &mut [Vec<u8>]) -> Result<Op, Frame> {
    let name = a[0].to_ascii_lowercase();
    let sub = match name.as_slice() {
        b"encoding" => ObjectSub::Encoding,
        b"freq" => ObjectSub::Freq,
        b"idletime" => ObjectSub::IdleTime,
        b"refcount" => ObjectSub::RefCount,
        b"help" if a.len() == 1 => return Ok(Op::Reply(help(OBJECT_HELP))),
        b"help" => return Err(wrong_subcommand_arity("object", &a[0])),
        _ => return Err(unknown_subcommand("object", &a[0])),
    };
    if a.len() != 2 {
        return Err(wrong_subcommand_arity("object", &a[0]));
    }
    Ok(Op::Key(KeyOp::Object {
        sub,
        key: take(a, 1),
    }))
}

fn parse_bitop(a: &mut [Vec<u8>]) -> Result<Op, Frame> {
    let op = match a[0].to_ascii_lowercase().as_slice() {
        b"and" => BitOpKind::And,
        b"or" => BitOpKind::Or,
        b"xor" => BitOpKind::Xor,
        b"not" => BitOpKind::Not,
        _ => return Err(syntax_error()),
    };
    if op == BitOpKind::Not && a.len() != 3 {
        return Err(Frame::error(
            "ERR BITOP NOT must be called with a single source key.",
        ));
    }
    Ok(Op::Str(StrOp::BitOp {
        op,
        dest: take(a, 1),
        sources: take_all(&mut a[2..]),
    }))
}

/// Key-value pairs of MSET/MSETNX (an odd count is a wrong arity).
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn parse_pairs(a: &mut [Vec<u8>], command: &str) -> Result<Pairs, Frame> {
    if a.len() % 2 != 0 {
        return Err(wrong_arity(command));
    }
    for pair in a.chunks_exact(2) {
        check_value(&pair[1])?;
    }
    Ok(a.chunks_exact_mut(2)
        .map(|pair| (take(pair, 0), take(pair, 1)))
        .collect())
}

/// COMMAND's entry for one command: name, arity, flags, first key, last key,
/// step, ACL categories, tips, key specs, subcommands.
pub(crate) fn command_info(spec: &Spec) -> Frame {
    let mut flags = Vec::new();
    match spec.kind {
        Kind::Data if spec.name.starts_with("fcall") || spec.name.starts_with("eval") => {
            flags.push(Frame::Simple("movablekeys".into()))
        }
        Kind::Data => {
            flags.push(Frame::Simple(
                if spec.write { "write" } else { "readonly" }.into(),
            ));
            // SORT's STORE destination is found by its keyword.
            if numkeys_at(spec.name).is_some() || spec.name == "sort" {
                flags.push(Frame::Simple("movablekeys".into()));
            }
        }
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
        Kind::Data if spec.name.starts_with("fcall") || spec.name.starts_with("eval") => {
            "scripting"
        }
        Kind::Data if hashes::is_hash_command(spec.name) => "hash",
        Kind::Data if sets::is_set_command(spec.name) => "set",
        Kind::Data if zsets::is_zset_command(spec.name) => "sorted-set",
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
    use crate::hashes::HashOp;
    use crate::lists::ListOp;
    use crate::sets::SetOp;
    use crate::zsets::ZSetOp;

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
                |op| matches!(op, Op::Set { key, value, cond: SetCond::Always, get: false, ttl: SetTtl::Clear } if key == b"k" && &**value == b"v"),
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
                "lpop k 2",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Pop { left: true, count: Some(2), .. })),
            ),
            (
                "rpop k",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Pop { left: false, count: None, .. })),
            ),
            (
                "lindex k -1",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Index { index: Ok(-1), .. })),
            ),
            (
                "lset k 0 v",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Set { index: Ok(0), value, .. } if value == b"v")),
            ),
            (
                "linsert k before p v",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Insert { before: true, .. })),
            ),
            (
                "lrem k -2 v",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Rem { count: -2, .. })),
            ),
            (
                "ltrim k 1 -1",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Trim { start: 1, stop: -1, .. })),
            ),
            (
                "lpos k e rank 2",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Pos(_))),
            ),
            (
                "lpushx k a b",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::PushX { left: true, values, .. } if values.len() == 2)),
            ),
            (
                "rpushx k a",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::PushX { left: false, .. })),
            ),
            (
                "lmove a b left right",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Move { from_left: true, to_left: false, timeout_ms: None, .. })),
            ),
            (
                "rpoplpush a b",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Move { from_left: false, to_left: true, .. })),
            ),
            (
                "lmpop 2 a b left count 2",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::MPop { keys, count: 2, timeout_ms: None, .. } if keys.len() == 2)),
            ),
            (
                "blpop a b 1",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::MPop { keys, left: true, timeout_ms: Some(1000), .. } if keys.len() == 2)),
            ),
            (
                "brpop a 0",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::MPop { left: false, timeout_ms: Some(0), .. })),
            ),
            (
                "blmove a b right left 0.5",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Move { timeout_ms: Some(500), .. })),
            ),
            (
                "brpoplpush a b 0",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::Move { timeout_ms: Some(0), .. })),
            ),
            (
                "blmpop 0 1 a right",
                |op| matches!(op, Op::Lists(l) if matches!(&**l, ListOp::MPop { left: false, count: 1, timeout_ms: Some(0), .. })),
            ),
            (
                "hget k f",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::Get { key, field } if key == b"k" && field == b"f")),
            ),
            (
                "hset k f v g w",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::Set { key, pairs, ok: false } if key == b"k" && pairs.len() == 2 && pairs[1] == (b"g".to_vec(), b"w".to_vec()))),
            ),
            (
                "hsetnx k f v",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::SetNx { field, value, .. } if field == b"f" && value == b"v")),
            ),
            (
                "hmset k f v",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::Set { ok: true, pairs, .. } if pairs.len() == 1)),
            ),
            (
                "hmget k f g",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::MGet { fields, .. } if fields.len() == 2)),
            ),
            (
                "hgetall k",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::GetAll(key) if key == b"k")),
            ),
            (
                "hdel k f g",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::Del { key, fields } if key == b"k" && fields.len() == 2)),
            ),
            (
                "hlen k",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::Len(_))),
            ),
            (
                "hexists k f",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::Exists { .. })),
            ),
            (
                "hkeys k",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::Keys(_))),
            ),
            (
                "hvals k",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::Vals(_))),
            ),
            (
                "hstrlen k f",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::StrLen { .. })),
            ),
            (
                "hincrby k f -5",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::IncrBy { by: -5, .. })),
            ),
            (
                "hincrbyfloat k f 1.5",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::IncrByFloat { field, .. } if field == b"f")),
            ),
            (
                "zmpop 2 a b max count 3",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::MPop { keys, max: true, count: 3, timeout_ms: None, waiting: false } if keys.len() == 2)),
            ),
            (
                "bzmpop 1.5 2 a b min",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::MPop { keys, max: false, count: 1, timeout_ms: Some(1500), waiting: false } if keys.len() == 2)),
            ),
            (
                "bzpopmin a b 0",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::BPop { keys, max: false, timeout_ms: 0, waiting: false } if keys.len() == 2)),
            ),
            (
                "bzpopmax a 2",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::BPop { max: true, timeout_ms: 2000, .. })),
            ),
            (
                "zrandmember k -3 withscores",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::RandMember { count: Some(-3), with_scores: true, .. })),
            ),
            (
                "hrandfield k -3 withvalues",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::RandField { count: Some(-3), with_values: true, .. })),
            ),
            (
                "hscan k 0 match f* count 5",
                |op| matches!(op, Op::Hashes(h) if matches!(&**h, HashOp::Scan { cursor: 0, options: Ok(o), .. } if o.count == 5 && o.pattern.as_deref() == Some(&b"f*"[..]))),
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
                "setex k 10 v",
                |op| matches!(op, Op::Set { ttl: SetTtl::At(d), value, .. } if d.ms == 10_000 && d.relative && &**value == b"v"),
            ),
            (
                "psetex k 10 v",
                |op| matches!(op, Op::Set { ttl: SetTtl::At(d), .. } if d.ms == 10 && d.relative),
            ),
            ("getset k v", |op| matches!(op, Op::Set { get: true, .. })),
            (
                "unlink k j",
                |op| matches!(op, Op::Del(keys) if keys.len() == 2),
            ),
            (
                "touch k",
                |op| matches!(op, Op::Exists(keys) if keys.len() == 1),
            ),
            (
                "type k",
                |op| matches!(op, Op::Key(KeyOp::Type(k)) if k == b"k"),
            ),
            (
                "rename a b",
                |op| matches!(op, Op::Key(KeyOp::Rename { nx: false, dst, .. }) if dst == b"b"),
            ),
            ("renamenx a b", |op| {
                matches!(op, Op::Key(KeyOp::Rename { nx: true, .. }))
            }),
            ("copy a b replace", |op| {
                matches!(op, Op::Key(KeyOp::Copy { replace: true, .. }))
            }),
            (
                "keys user:*",
                |op| matches!(op, Op::Key(KeyOp::Keys(p)) if p.as_slice() == b"user:*"),
            ),
            (
                "scan 5 match * count 7 type list",
                |op| matches!(op, Op::Key(KeyOp::Scan(a)) if a.cursor == 5 && a.pattern.is_none() && a.count == 7 && a.kind.is_some()),
            ),
            ("randomkey", |op| matches!(op, Op::Key(KeyOp::RandomKey))),
            ("dbsize", |op| matches!(op, Op::Key(KeyOp::DbSize))),
            ("flushdb", |op| matches!(op, Op::Key(KeyOp::Flush))),
            ("flushall async", |op| matches!(op, Op::Key(KeyOp::Flush))),
            (
                "memory usage k samples 5",
                |op| matches!(op, Op::Key(KeyOp::MemoryUsage(key)) if key == b"k"),
            ),
            ("object encoding k", |op| {
                matches!(
                    op,
                    Op::Key(KeyOp::Object {
                        sub: ObjectSub::Encoding,
                        ..
                    })
                )
            }),
            (
                "expire k 10 nx",
                |op| matches!(op, Op::Expire(ExpireOp::Expire { ms: 10_000, relative: true, cond, .. }) if cond.nx),
            ),
            ("pexpire k 10", |op| {
                matches!(
                    op,
                    Op::Expire(ExpireOp::Expire {
                        ms: 10,
                        relative: true,
                        ..
                    })
                )
            }),
            ("expireat k 10", |op| {
                matches!(
                    op,
                    Op::Expire(ExpireOp::Expire {
                        ms: 10_000,
                        relative: false,
                        ..
                    })
                )
            }),
            (
                "pexpireat k 10 gt",
                |op| matches!(op, Op::Expire(ExpireOp::Expire { ms: 10, relative: false, cond, .. }) if cond.gt),
            ),
            ("ttl k", |op| {
                matches!(
                    op,
                    Op::Expire(ExpireOp::Ttl {
                        in_ms: false,
                        absolute: false,
                        ..
                    })
                )
            }),
            ("pttl k", |op| {
                matches!(
                    op,
                    Op::Expire(ExpireOp::Ttl {
                        in_ms: true,
                        absolute: false,
                        ..
                    })
                )
            }),
            ("expiretime k", |op| {
                matches!(
                    op,
                    Op::Expire(ExpireOp::Ttl {
                        in_ms: false,
                        absolute: true,
                        ..
                    })
                )
            }),
            ("pexpiretime k", |op| {
                matches!(
                    op,
                    Op::Expire(ExpireOp::Ttl {
                        in_ms: true,
                        absolute: true,
                        ..
                    })
                )
            }),
            ("persist k", |op| {
                matches!(op, Op::Expire(ExpireOp::Persist(_)))
            }),
            ("getex k persist", |op| {
                matches!(
                    op,
                    Op::Expire(ExpireOp::GetEx {
                        ttl: GetExTtl::Persist,
                        ..
                    })
                )
            }),
            ("setnx k v", |op| matches!(op, Op::Str(StrOp::SetNx { .. }))),
            ("getdel k", |op| matches!(op, Op::Str(StrOp::GetDel(_)))),
            ("append k v", |op| {
                matches!(op, Op::Str(StrOp::Append { .. }))
            }),
            ("strlen k", |op| matches!(op, Op::Str(StrOp::StrLen(_)))),
            ("getrange k 0 -1", |op| {
                matches!(
                    op,
                    Op::Str(StrOp::GetRange {
                        start: 0,
                        end: -1,
                        ..
                    })
                )
            }),
            ("substr k 1 2", |op| {
                matches!(
                    op,
                    Op::Str(StrOp::GetRange {
                        start: 1,
                        end: 2,
                        ..
                    })
                )
            }),
            ("setrange k 3 v", |op| {
                matches!(op, Op::Str(StrOp::SetRange { offset: 3, .. }))
            }),
            (
                "msetnx a 1 b 2",
                |op| matches!(op, Op::Str(StrOp::MSetNx(p)) if p.len() == 2),
            ),
            (
                "incrbyfloat k 1.5",
                |op| matches!(op, Op::Str(StrOp::IncrByFloat { incr, .. }) if incr == b"1.5"),
            ),
            ("setbit k 7 1", |op| {
                matches!(
                    op,
                    Op::Str(StrOp::SetBit {
                        offset: 7,
                        bit: true,
                        ..
                    })
                )
            }),
            ("getbit k 7", |op| {
                matches!(op, Op::Str(StrOp::GetBit { offset: 7, .. }))
            }),
            (
                "bitcount k 0 -1",
                |op| matches!(op, Op::Str(StrOp::BitCount { range, .. }) if range.len() == 2),
            ),
            (
                "bitpos k 1 2",
                |op| matches!(op, Op::Str(StrOp::BitPos { bit: true, range, .. }) if range.len() == 1),
            ),
            (
                "bitop xor d a b",
                |op| matches!(op, Op::Str(StrOp::BitOp { op: BitOpKind::Xor, sources, .. }) if sources.len() == 2),
            ),
            (
                "sadd k a b",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Add { members, .. } if members.len() == 2)),
            ),
            (
                "srem k a",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Rem { .. })),
            ),
            (
                "smembers k",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Members(_))),
            ),
            (
                "sismember k a",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::IsMember { .. })),
            ),
            (
                "smismember k a b",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::MIsMember { .. })),
            ),
            (
                "scard k",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Card(_))),
            ),
            (
                "spop k 3",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Pop { count: Some(3), .. })),
            ),
            (
                "srandmember k -3",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::RandMember { count: Some(-3), .. })),
            ),
            (
                "sort k by w_* limit 0 2 get # desc alpha store d",
                |op| matches!(op, Op::Sort(s) if s.key == b"k" && s.desc && s.alpha && s.gets.len() == 1 && s.store.as_deref() == Some(&b"d"[..])),
            ),
            (
                "sort_ro k get o_*",
                |op| matches!(op, Op::Sort(s) if s.key == b"k" && s.store.is_none() && s.gets.len() == 1),
            ),
            (
                "sinter a b",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Combine { how: sets::Combine::Inter, store: None, .. })),
            ),
            (
                "sunion a b",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Combine { how: sets::Combine::Union, .. })),
            ),
            (
                "sdiff a b",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Combine { how: sets::Combine::Diff, .. })),
            ),
            (
                "sinterstore d a b",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Combine { store: Some(d), keys, .. } if d == b"d" && keys.len() == 2)),
            ),
            (
                "sunionstore d a",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Combine { store: Some(_), .. })),
            ),
            (
                "sdiffstore d a",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Combine { store: Some(_), .. })),
            ),
            (
                "sintercard 2 a b limit 5",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::InterCard { limit: 5, keys } if keys.len() == 2)),
            ),
            (
                "smove a b m",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Move { .. })),
            ),
            (
                "sscan k 0 match a* count 5",
                |op| matches!(op, Op::Sets(s) if matches!(&**s, SetOp::Scan { cursor: 0, options: Ok(o), .. } if o.count == 5)),
            ),
            (
                "zadd k nx ch 1 a 2 b",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Add { flags, pairs, .. } if flags.nx && flags.ch && pairs.len() == 2)),
            ),
            (
                "zincrby k 1.5 a",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Add { flags, .. } if flags.incr)),
            ),
            (
                "zscore k a",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Score { .. })),
            ),
            (
                "zmscore k a b",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::MScore { .. })),
            ),
            (
                "zcard k",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Card(_))),
            ),
            (
                "zrange k (1 +inf byscore rev limit 0 2 withscores",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Range(r) if r.rev && r.withscores && r.count == 2)),
            ),
            (
                "zrangestore d k 0 -1",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Range(r) if r.store.is_some())),
            ),
            (
                "zrangebyscore k 1 2",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Range(r) if !r.rev)),
            ),
            (
                "zrevrangebyscore k 2 1",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Range(r) if r.rev)),
            ),
            (
                "zrevrange k 0 1",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Range(r) if r.rev)),
            ),
            (
                "zrangebylex k - +",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Range(_))),
            ),
            (
                "zrevrangebylex k + -",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Range(r) if r.rev)),
            ),
            (
                "zrank k a withscore",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Rank { withscore: true, rev: false, .. })),
            ),
            (
                "zrevrank k a",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Rank { rev: true, .. })),
            ),
            (
                "zrem k a",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Rem { .. })),
            ),
            (
                "zremrangebyrank k 0 1",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::RemRange { .. })),
            ),
            (
                "zremrangebyscore k 0 1",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::RemRange { .. })),
            ),
            (
                "zremrangebylex k - +",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::RemRange { .. })),
            ),
            (
                "zcount k 0 1",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Count { .. })),
            ),
            (
                "zlexcount k - +",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Count { .. })),
            ),
            (
                "zpopmin k 2",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Pop { max: false, count: Some(2), .. })),
            ),
            (
                "zpopmax k",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Pop { max: true, count: None, .. })),
            ),
            (
                "zunion 2 a b weights 1 2 aggregate max withscores",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Combine(c) if c.keys.len() == 2 && c.options.as_ref().is_ok_and(|o| o.withscores && o.weights == [1.0, 2.0]))),
            ),
            (
                "zinter 1 a",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Combine(_))),
            ),
            (
                "zintercard 2 a b limit 3",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Combine(c) if c.keys.len() == 2 && c.card_limit == Some(3) && c.store.is_none())),
            ),
            (
                "zdiff 1 a",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Combine(_))),
            ),
            (
                "zunionstore d 1 a",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Combine(c) if c.store.is_some())),
            ),
            (
                "zinterstore d 1 a",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Combine(c) if c.store.is_some())),
            ),
            (
                "zdiffstore d 1 a",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Combine(c) if c.store.is_some())),
            ),
            (
                "zscan k 0",
                |op| matches!(op, Op::ZSets(z) if matches!(&**z, ZSetOp::Scan { .. })),
            ),
            (
                "fcall sum 1 k",
                |op| matches!(op, Op::FCall(call) if call.first_key() == Some(&b"k"[..])),
            ),
            (
                "fcall_ro sum 1 k",
                |op| matches!(op, Op::FCall(call) if call.first_key() == Some(&b"k"[..])),
            ),
            (
                "eval return 1 k",
                |op| matches!(op, Op::Script(call) if call.first_key() == Some(&b"k"[..])),
            ),
            (
                "eval_ro return 1 k",
                |op| matches!(op, Op::Script(call) if call.first_key() == Some(&b"k"[..])),
            ),
            // No script cached under this name.
            (
                "evalsha 0000 1 k",
                |op| matches!(op, Op::Reply(Frame::Error(e)) if e.starts_with("NOSCRIPT")),
            ),
            (
                "evalsha_ro 0000 1 k",
                |op| matches!(op, Op::Reply(Frame::Error(e)) if e.starts_with("NOSCRIPT")),
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
        assert!(matches!(
            parse_op_examples(spec, args("set k v ex 10 keepttl")),
            Op::Reply(Frame::Error(e)) if e == "ERR syntax error"
        ));
        assert!(matches!(
            parse_op_examples(spec, args("set k v px 10 xx")),
            Op::Set { cond: SetCond::IfPresent, ttl: SetTtl::At(d), .. } if d.ms == 10
        ));
        assert!(matches!(
            parse_op_examples(spec, args("set k v keepttl")),
            Op::Set {
                ttl: SetTtl::Keep,
                ..
            }
        ));
        assert!(matches!(
            parse_op_examples(spec, args("set k v ex 0")),
            Op::Reply(Frame::Error(e)) if e == "ERR invalid expire time in 'set' command"
        ));
    }

    /// The hash commands' argument errors, with Redis 7.0's texts, found
    /// before the key is looked at (answered in the command's place).
    #[test]
    fn hash_argument_errors() {
        let error = |line: &str| {
            let a = args(line);
            let spec = lookup(&a[0]).unwrap();
            assert!(arity_ok(spec, a.len()), "{line}: arity");
            match parse_op_examples(spec, a) {
                Op::Reply(Frame::Error(e)) => e,
                other => panic!("{line}: parsed as {other:?}"),
            }
        };
        assert_eq!(
            error("hset k f v g"),
            "ERR wrong number of arguments for 'hset' command"
        );
        assert_eq!(
            error("hmset k f v g"),
            "ERR wrong number of arguments for 'hmset' command"
        );
        assert_eq!(
            error("hincrby k f x"),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error("hincrby k f 9223372036854775808"),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error("hincrbyfloat k f abc"),
            "ERR value is not a valid float"
        );
        assert_eq!(
            error("hincrbyfloat k f nan"),
            "ERR value is not a valid float"
        );
        assert_eq!(
            error("hincrbyfloat k f inf"),
            "ERR value is NaN or Infinity"
        );
        assert_eq!(
            error("hrandfield k x"),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error("hrandfield k -9223372036854775808"),
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"
        );
        assert_eq!(error("hrandfield k 1 withvalue"), "ERR syntax error");
        assert_eq!(error("hrandfield k 1 withvalues x"), "ERR syntax error");
        assert_eq!(
            error("hrandfield k 9223372036854775807 withvalues"),
            "ERR value is out of range"
        );
        assert_eq!(error("hscan k x"), "ERR invalid cursor");
        let long = format!("hget k {}", "f".repeat(2049));
        assert_eq!(error(&long), "ERR field is longer than 2048 bytes");
        // COUNT 0 is answered after the key's type (the key may not be a hash).
        let spec = lookup(b"hscan").unwrap();
        assert!(matches!(
            parse_op_examples(spec, args("hscan k 0 count 0")),
            Op::Hashes(h) if matches!(&*h, HashOp::Scan { options: Err(_), .. })
        ));
        // HRANDFIELD's WITHVALUES bound is for a count with values only.
        let spec = lookup(b"hrandfield").unwrap();
        assert!(matches!(
            parse_op_examples(spec, args("hrandfield k 9223372036854775807")),
            Op::Hashes(h) if matches!(&*h, HashOp::RandField { count: Some(i64::MAX), with_values: false, .. })
        ));
    }

    #[test]
    fn scan_cursors_read_as_strtoul() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b"+5"), Some(5));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"abc",
            b"1 ",
            b" 1",
            b"18446744073709551616",
            b"-",
        ] {
            assert_eq!(parse_cursor(bad), None, "{bad:?}");
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

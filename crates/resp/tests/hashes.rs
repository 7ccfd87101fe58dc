//! Hashes (a row per field) driven over a socket: every hash command's
//! replies and error texts, WRONGTYPE against a string and a set, an
//! emptied hash disappearing, HINCRBY's overflow, HINCRBYFLOAT's errors,
//! HRANDFIELD's counts, HSCAN of a large hash to completion, the key
//! commands (TYPE, DEL, RENAME, COPY, EXPIRE, OBJECT ENCODING, SCAN TYPE)
//! over hashes, MULTI/EXEC, WATCH, scripts and Lua functions, RESP3, and
//! concurrent HINCRBYs on the same fields.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::{config, connect, err, q, start, Raw};
use roost_resp::protocol::Frame;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn bulk(s: &str) -> Frame {
    Frame::bulk(s)
}

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn bulks(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| bulk(s)).collect())
}

/// An array's elements as strings, sorted (replies in scan-position order).
fn sorted(frame: Frame) -> Vec<String> {
    let mut items: Vec<String> = match frame {
        Frame::Array(items) => items
            .into_iter()
            .map(|f| match f {
                Frame::Bulk(b) => String::from_utf8(b).unwrap(),
                other => panic!("not a bulk: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    };
    items.sort();
    items
}

/// A RESP2 flat array of fields and values as a map.
fn pairs(frame: Frame) -> HashMap<String, String> {
    match frame {
        Frame::Array(items) => {
            assert_eq!(items.len() % 2, 0, "pairs: {items:?}");
            items
                .chunks(2)
                .map(|pair| match pair {
                    [Frame::Bulk(f), Frame::Bulk(v)] => (
                        String::from_utf8(f.clone()).unwrap(),
                        String::from_utf8(v.clone()).unwrap(),
                    ),
                    other => panic!("not a pair: {other:?}"),
                })
                .collect()
        }
        other => panic!("not an array: {other:?}"),
    }
}

fn map(entries: &[(&str, &str)]) -> HashMap<String, String> {
    entries
        .iter()
        .map(|(f, v)| (f.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hash_command_answers_as_redis() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    // HSET counts the fields it added (a repeated field counts once).
    assert_eq!(r.call(&["HSET", "h", "a", "1", "b", "2"]).await, int(2));
    assert_eq!(r.call(&["HSET", "h", "a", "10", "c", "3"]).await, int(1));
    assert_eq!(r.call(&["HSET", "h", "d", "x", "d", "y"]).await, int(1));
    assert_eq!(r.call(&["HGET", "h", "d"]).await, bulk("y"));
    assert_eq!(
        r.call(&["HMSET", "h", "e", "5", "a", "1"]).await,
        Frame::ok()
    );
    assert_eq!(r.call(&["HSETNX", "h", "a", "no"]).await, int(0));
    assert_eq!(r.call(&["HSETNX", "h", "f", "6"]).await, int(1));
    assert_eq!(r.call(&["HSETNX", "new", "f", "v"]).await, int(1));
    assert_eq!(r.call(&["HGET", "h", "a"]).await, bulk("1"));
    assert_eq!(r.call(&["HGET", "h", "nofield"]).await, Frame::Null);
    assert_eq!(r.call(&["HGET", "nokey", "a"]).await, Frame::Null);
    assert_eq!(
        r.call(&["HMGET", "h", "a", "nofield", "b"]).await,
        Frame::Array(vec![bulk("1"), Frame::Null, bulk("2")])
    );
    assert_eq!(
        r.call(&["HMGET", "nokey", "a", "b"]).await,
        Frame::Array(vec![Frame::Null, Frame::Null])
    );
    let all = map(&[
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
        ("d", "y"),
        ("e", "5"),
        ("f", "6"),
    ]);
    assert_eq!(pairs(r.call(&["HGETALL", "h"]).await), all);
    assert_eq!(
        r.call(&["HGETALL", "nokey"]).await,
        Frame::Array(Vec::new())
    );
    assert_eq!(r.call(&["HLEN", "h"]).await, int(6));
    assert_eq!(r.call(&["HLEN", "nokey"]).await, int(0));
    assert_eq!(r.call(&["HEXISTS", "h", "a"]).await, int(1));
    assert_eq!(r.call(&["HEXISTS", "h", "zz"]).await, int(0));
    assert_eq!(r.call(&["HEXISTS", "nokey", "a"]).await, int(0));
    assert_eq!(
        sorted(r.call(&["HKEYS", "h"]).await),
        ["a", "b", "c", "d", "e", "f"]
    );
    assert_eq!(
        sorted(r.call(&["HVALS", "h"]).await),
        ["1", "2", "3", "5", "6", "y"]
    );
    assert_eq!(r.call(&["HKEYS", "nokey"]).await, Frame::Array(Vec::new()));
    assert_eq!(r.call(&["HVALS", "nokey"]).await, Frame::Array(Vec::new()));
    // HKEYS and HVALS in the same order as HGETALL.
    let keys = r.call(&["HKEYS", "h"]).await;
    let vals = r.call(&["HVALS", "h"]).await;
    let mut flat = Vec::new();
    if let (Frame::Array(k), Frame::Array(v)) = (keys, vals) {
        for (k, v) in k.into_iter().zip(v) {
            flat.push(k);
            flat.push(v);
        }
    }
    assert_eq!(r.call(&["HGETALL", "h"]).await, Frame::Array(flat));
    r.call(&["HSET", "h", "long", "hello world"]).await;
    assert_eq!(r.call(&["HSTRLEN", "h", "long"]).await, int(11));
    assert_eq!(r.call(&["HSTRLEN", "h", "nofield"]).await, int(0));
    assert_eq!(r.call(&["HSTRLEN", "nokey", "a"]).await, int(0));
    assert_eq!(r.call(&["HINCRBY", "h", "a", "5"]).await, int(6));
    assert_eq!(r.call(&["HINCRBY", "h", "a", "-10"]).await, int(-4));
    assert_eq!(r.call(&["HINCRBY", "h", "n", "7"]).await, int(7));
    assert_eq!(r.call(&["HINCRBY", "fresh", "n", "-3"]).await, int(-3));
    assert_eq!(r.call(&["HGET", "h", "a"]).await, bulk("-4"));
    assert_eq!(
        r.call(&["HINCRBYFLOAT", "h", "fl", "10.5"]).await,
        bulk("10.5")
    );
    assert_eq!(
        r.call(&["HINCRBYFLOAT", "h", "fl", "0.1"]).await,
        bulk("10.6")
    );
    assert_eq!(
        r.call(&["HINCRBYFLOAT", "h", "fl", "-10.6"]).await,
        bulk("0")
    );
    assert_eq!(r.call(&["HINCRBYFLOAT", "h", "a", "1e2"]).await, bulk("96"));
    assert_eq!(
        r.call(&["HINCRBYFLOAT", "h", "b", "2.5e-1"]).await,
        bulk("2.25")
    );
    assert_eq!(r.call(&["HGET", "h", "b"]).await, bulk("2.25"));
    // HDEL counts what it removed.
    assert_eq!(
        r.call(&["HDEL", "h", "a", "b", "nofield", "a"]).await,
        int(2)
    );
    assert_eq!(r.call(&["HDEL", "nokey", "a"]).await, int(0));
    assert_eq!(r.call(&["HEXISTS", "h", "a"]).await, int(0));
    assert_eq!(r.call(&["TYPE", "h"]).await, Frame::Simple("hash".into()));
    // Arity, as Redis words it.
    for (line, name) in [
        (&["HSET", "h", "f"][..], "hset"),
        (&["HSET", "h", "f", "v", "g"], "hset"),
        (&["HMSET", "h", "f", "v", "g"], "hmset"),
        (&["HSETNX", "h", "f"], "hsetnx"),
        (&["HGET", "h"], "hget"),
        (&["HMGET", "h"], "hmget"),
        (&["HGETALL"], "hgetall"),
        (&["HDEL", "h"], "hdel"),
        (&["HLEN"], "hlen"),
        (&["HEXISTS", "h"], "hexists"),
        (&["HKEYS", "h", "x"], "hkeys"),
        (&["HVALS"], "hvals"),
        (&["HSTRLEN", "h"], "hstrlen"),
        (&["HINCRBY", "h", "f"], "hincrby"),
        (&["HINCRBYFLOAT", "h", "f"], "hincrbyfloat"),
        (&["HRANDFIELD"], "hrandfield"),
        (&["HSCAN", "h"], "hscan"),
    ] {
        assert_eq!(
            r.call(line).await,
            err(&format!(
                "ERR wrong number of arguments for '{name}' command"
            )),
            "{line:?}"
        );
    }
    // Roost's bound on a field (part of a row key).
    let long = "f".repeat(2049);
    assert_eq!(
        r.call(&["HSET", "h", &long, "v"]).await,
        err("ERR field is longer than 2048 bytes")
    );
    assert_eq!(r.call(&["HSET", "h", &"f".repeat(2048), "v"]).await, int(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_type_against_strings_and_sets() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    r.call(&["SET", "s", "v"]).await;
    r.call(&["SADD", "set", "a", "b"]).await;
    for key in ["s", "set"] {
        for line in [
            &["HSET", key, "f", "v"][..],
            &["HSETNX", key, "f", "v"],
            &["HMSET", key, "f", "v"],
            &["HGET", key, "f"],
            &["HMGET", key, "f", "g"],
            &["HGETALL", key],
            &["HDEL", key, "f"],
            &["HLEN", key],
            &["HEXISTS", key, "f"],
            &["HKEYS", key],
            &["HVALS", key],
            &["HSTRLEN", key, "f"],
            &["HINCRBY", key, "f", "1"],
            &["HINCRBYFLOAT", key, "f", "1"],
            &["HRANDFIELD", key],
            &["HRANDFIELD", key, "0"],
            &["HRANDFIELD", key, "-3", "WITHVALUES"],
            &["HSCAN", key, "0"],
            // COUNT's error comes after the key's type.
            &["HSCAN", key, "0", "COUNT", "0"],
        ] {
            assert_eq!(r.call(line).await, err(WRONGTYPE), "{line:?}");
        }
    }
    // The string and the set are untouched.
    assert_eq!(r.call(&["GET", "s"]).await, bulk("v"));
    assert_eq!(r.call(&["SCARD", "set"]).await, int(2));
    // Argument errors Redis finds before the key's type.
    assert_eq!(
        r.call(&["HINCRBY", "s", "f", "x"]).await,
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.call(&["HINCRBYFLOAT", "set", "f", "abc"]).await,
        err("ERR value is not a valid float")
    );
    assert_eq!(
        r.call(&["HSCAN", "s", "x"]).await,
        err("ERR invalid cursor")
    );
    // And the other way round: a hash to string, set and sorted-set commands.
    r.call(&["HSET", "h", "f", "v"]).await;
    for line in [
        &["GET", "h"][..],
        &["APPEND", "h", "x"],
        &["INCR", "h"],
        &["SADD", "h", "a"],
        &["SMEMBERS", "h"],
        &["SCARD", "h"],
        &["SSCAN", "h", "0"],
        &["SINTER", "h", "set"],
        &["ZADD", "h", "1", "a"],
        &["ZCARD", "h"],
        &["ZUNION", "1", "h"],
        &["LRANGE", "h", "0", "-1"],
    ] {
        assert_eq!(r.call(line).await, err(WRONGTYPE), "{line:?}");
    }
    assert_eq!(r.call(&["HLEN", "h"]).await, int(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_hash_is_deleted() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["HSET", "h", "a", "1", "b", "2"]).await, int(2));
    assert_eq!(r.call(&["DBSIZE"]).await, int(1));
    assert_eq!(r.call(&["HDEL", "h", "a"]).await, int(1));
    assert_eq!(r.call(&["EXISTS", "h"]).await, int(1));
    assert_eq!(r.call(&["HDEL", "h", "b", "c"]).await, int(1));
    assert_eq!(r.call(&["EXISTS", "h"]).await, int(0));
    assert_eq!(r.call(&["TYPE", "h"]).await, Frame::Simple("none".into()));
    assert_eq!(r.call(&["HLEN", "h"]).await, int(0));
    assert_eq!(r.call(&["HGETALL", "h"]).await, Frame::Array(Vec::new()));
    assert_eq!(r.call(&["DBSIZE"]).await, int(0));
    assert_eq!(r.call(&["KEYS", "*"]).await, Frame::Array(Vec::new()));
    // A new hash under the name starts empty.
    assert_eq!(r.call(&["HSET", "h", "c", "3"]).await, int(1));
    assert_eq!(r.call(&["HGETALL", "h"]).await, bulks(&["c", "3"]));
    // An error leaves no empty hash behind.
    assert_eq!(
        r.call(&["HINCRBY", "x", "f", "abc"]).await,
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.call(&["EXISTS", "x"]).await, int(0));
    // SET over a hash replaces it, fields and all.
    r.call(&["HSET", "h", "d", "4"]).await;
    assert_eq!(r.call(&["SET", "h", "str"]).await, Frame::ok());
    assert_eq!(r.call(&["HGET", "h", "c"]).await, err(WRONGTYPE));
    assert_eq!(r.call(&["DEL", "h"]).await, int(1));
    assert_eq!(r.call(&["HSET", "h", "e", "5"]).await, int(1));
    assert_eq!(r.call(&["HGETALL", "h"]).await, bulks(&["e", "5"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn increments_and_their_errors() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    r.call(&["HSET", "h", "big", "9223372036854775800", "s", "abc"])
        .await;
    r.call(&["HSET", "h", "small", "-9223372036854775800", "f", "1.5"])
        .await;
    assert_eq!(
        r.call(&["HINCRBY", "h", "big", "100"]).await,
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(
        r.call(&["HINCRBY", "h", "small", "-9"]).await,
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(r.call(&["HINCRBY", "h", "big", "7"]).await, int(i64::MAX));
    assert_eq!(
        r.call(&["HINCRBY", "h", "small", "-8"]).await,
        int(i64::MIN)
    );
    // The failed ones changed nothing.
    assert_eq!(
        r.call(&["HGET", "h", "big"]).await,
        bulk("9223372036854775807")
    );
    assert_eq!(
        r.call(&["HINCRBY", "h", "s", "1"]).await,
        err("ERR hash value is not an integer")
    );
    assert_eq!(
        r.call(&["HINCRBY", "h", "f", "1"]).await,
        err("ERR hash value is not an integer")
    );
    assert_eq!(
        r.call(&["HINCRBY", "h", "f", "1.5"]).await,
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.call(&["HINCRBY", "h", "n", "9223372036854775808"]).await,
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.call(&["HEXISTS", "h", "n"]).await, int(0));
    // HINCRBYFLOAT.
    assert_eq!(
        r.call(&["HINCRBYFLOAT", "h", "s", "1"]).await,
        err("ERR hash value is not a float")
    );
    for bad in ["abc", "nan", "", "1.5x", " 1"] {
        assert_eq!(
            r.call(&["HINCRBYFLOAT", "h", "f", bad]).await,
            err("ERR value is not a valid float"),
            "{bad:?}"
        );
    }
    for infinite in ["inf", "-inf", "+inf"] {
        assert_eq!(
            r.call(&["HINCRBYFLOAT", "h", "f", infinite]).await,
            err("ERR value is NaN or Infinity"),
            "{infinite}"
        );
    }
    assert_eq!(r.call(&["HGET", "h", "f"]).await, bulk("1.5"));
    assert_eq!(r.call(&["HINCRBYFLOAT", "h", "f", "1"]).await, bulk("2.5"));
    // An integer field reads as a float; the sum is stored as its text.
    assert_eq!(
        r.call(&["HINCRBYFLOAT", "h", "big", "-7"]).await,
        bulk("9223372036854775800")
    );
    r.call(&["HSET", "h", "huge", "1e308"]).await;
    assert_eq!(
        r.call(&["HINCRBYFLOAT", "h", "huge", "1e308"]).await,
        err("ERR increment would produce NaN or Infinity")
    );
    assert_eq!(r.call(&["HGET", "h", "huge"]).await, bulk("1e308"));
    assert_eq!(
        r.call(&["HINCRBYFLOAT", "nokey", "f", "0x10"]).await,
        bulk("16")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hrandfield_counts() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let mut line = vec!["HSET", "h"];
    let names: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
    let values: Vec<String> = (0..50).map(|i| format!("v{i}")).collect();
    for (f, v) in names.iter().zip(&values) {
        line.push(f);
        line.push(v);
    }
    assert_eq!(r.call(&line).await, int(50));
    let fields: HashSet<String> = names.iter().cloned().collect();
    // No count: one field.
    for _ in 0..20 {
        match r.call(&["HRANDFIELD", "h"]).await {
            Frame::Bulk(f) => assert!(fields.contains(&String::from_utf8(f).unwrap())),
            other => panic!("HRANDFIELD: {other:?}"),
        }
    }
    assert_eq!(r.call(&["HRANDFIELD", "nokey"]).await, Frame::Null);
    assert_eq!(
        r.call(&["HRANDFIELD", "nokey", "5"]).await,
        Frame::Array(Vec::new())
    );
    assert_eq!(
        r.call(&["HRANDFIELD", "h", "0"]).await,
        Frame::Array(Vec::new())
    );
    assert_eq!(
        r.call(&["HRANDFIELD", "h", "0", "WITHVALUES"]).await,
        Frame::Array(Vec::new())
    );
    // Positive counts: distinct fields, at most the hash.
    for count in [1usize, 5, 16, 17, 30, 49, 50, 51, 1000] {
        let got = sorted(r.call(&["HRANDFIELD", "h", &count.to_string()]).await);
        assert_eq!(got.len(), count.min(50), "count {count}");
        let distinct: HashSet<&String> = got.iter().collect();
        assert_eq!(distinct.len(), got.len(), "count {count}: repeats");
        assert!(got.iter().all(|f| fields.contains(f)), "count {count}");
    }
    // WITHVALUES: each field with its own value.
    match r.call(&["HRANDFIELD", "h", "10", "withvalues"]).await {
        Frame::Array(items) => {
            assert_eq!(items.len(), 20);
            let got = pairs(Frame::Array(items));
            assert_eq!(got.len(), 10);
            for (f, v) in got {
                assert_eq!(f[1..], v[1..], "{f} has {v}");
            }
        }
        other => panic!("HRANDFIELD WITHVALUES: {other:?}"),
    }
    // Negative counts: exactly that many, repeats allowed.
    let got = sorted(r.call(&["HRANDFIELD", "h", "-200"]).await);
    assert_eq!(got.len(), 200);
    assert!(got.iter().all(|f| fields.contains(f)));
    match r.call(&["HRANDFIELD", "h", "-7", "WITHVALUES"]).await {
        Frame::Array(items) => {
            assert_eq!(items.len(), 14);
            for pair in items.chunks(2) {
                match pair {
                    [Frame::Bulk(f), Frame::Bulk(v)] => assert_eq!(f[1..], v[1..]),
                    other => panic!("{other:?}"),
                }
            }
        }
        other => panic!("HRANDFIELD -7 WITHVALUES: {other:?}"),
    }
    r.call(&["HSET", "one", "only", "x"]).await;
    assert_eq!(
        r.call(&["HRANDFIELD", "one", "-3"]).await,
        bulks(&["only", "only", "only"])
    );
    assert_eq!(
        r.call(&["HRANDFIELD", "one", "-2", "WITHVALUES"]).await,
        bulks(&["only", "x", "only", "x"])
    );
    // Argument errors, as Redis words them.
    assert_eq!(
        r.call(&["HRANDFIELD", "h", "x"]).await,
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.call(&["HRANDFIELD", "h", "1", "WITHVALUE"]).await,
        err("ERR syntax error")
    );
    assert_eq!(
        r.call(&["HRANDFIELD", "h", "1", "WITHVALUES", "x"]).await,
        err("ERR syntax error")
    );
    assert_eq!(
        r.call(&["HRANDFIELD", "h", "-9223372036854775808"]).await,
        err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    );
    assert_eq!(
        r.call(&["HRANDFIELD", "h", "9223372036854775807", "WITHVALUES"])
            .await,
        err("ERR value is out of range")
    );
    assert_eq!(
        r.call(&["HRANDFIELD", "h", "-2000000"]).await,
        err("ERR HRANDFIELD with a negative count returns at most 1000000 fields")
    );
}

/// Every field and value a whole HSCAN returns with these options, and
/// how many calls it took.
async fn hscan_all(r: &mut Raw, key: &str, options: &[&str]) -> (Vec<(String, String)>, usize) {
    let mut cursor = "0".to_string();
    let mut found = Vec::new();
    let mut calls = 0;
    loop {
        let mut line = vec!["HSCAN", key, &cursor];
        line.extend_from_slice(options);
        calls += 1;
        assert!(calls < 100_000, "HSCAN did not finish");
        match r.call(&line).await {
            Frame::Array(parts) => match parts.as_slice() {
                [Frame::Bulk(next), Frame::Array(items)] => {
                    assert_eq!(items.len() % 2, 0);
                    for pair in items.chunks(2) {
                        match pair {
                            [Frame::Bulk(f), Frame::Bulk(v)] => found.push((
                                String::from_utf8(f.clone()).unwrap(),
                                String::from_utf8(v.clone()).unwrap(),
                            )),
                            other => panic!("HSCAN pair {other:?}"),
                        }
                    }
                    cursor = String::from_utf8(next.clone()).unwrap();
                }
                other => panic!("HSCAN reply {other:?}"),
            },
            other => panic!("HSCAN reply {other:?}"),
        }
        if cursor == "0" {
            return (found, calls);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hscan_returns_every_field_once() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    // 1,000 fields, past the walks' 512-row chunks, in pipelined HSETs.
    for chunk in 0..10 {
        let mut line = vec!["HSET".to_string(), "big".to_string()];
        for i in chunk * 100..(chunk + 1) * 100 {
            line.push(format!("field:{i}"));
            line.push(format!("value:{i}"));
        }
        let line: Vec<&str> = line.iter().map(String::as_str).collect();
        assert_eq!(r.call(&line).await, int(100));
    }
    assert_eq!(r.call(&["HLEN", "big"]).await, int(1000));
    let expected: Vec<(String, String)> = {
        let mut all: Vec<(String, String)> = (0..1000)
            .map(|i| (format!("field:{i}"), format!("value:{i}")))
            .collect();
        all.sort();
        all
    };
    for (options, min_calls) in [
        (&[][..], 100),
        (&["COUNT", "7"], 143),
        (&["COUNT", "1"], 1000),
        (&["COUNT", "100000"], 1),
    ] {
        let (mut found, calls) = hscan_all(&mut r, "big", options).await;
        assert!(calls >= min_calls, "{options:?}: {calls} calls");
        found.sort();
        assert_eq!(found.len(), 1000, "{options:?}: a field twice or missing");
        assert_eq!(found, expected, "{options:?}");
    }
    // MATCH filters what each call walked.
    let (mut found, _) = hscan_all(&mut r, "big", &["MATCH", "field:1?", "COUNT", "50"]).await;
    found.sort();
    let tens: Vec<(String, String)> = (10..20)
        .map(|i| (format!("field:{i}"), format!("value:{i}")))
        .collect();
    assert_eq!(found, tens);
    // HGETALL, HKEYS and HVALS read past the chunks too.
    assert_eq!(pairs(r.call(&["HGETALL", "big"]).await).len(), 1000);
    assert_eq!(sorted(r.call(&["HKEYS", "big"]).await).len(), 1000);
    assert_eq!(sorted(r.call(&["HVALS", "big"]).await).len(), 1000);
    assert_eq!(
        sorted(r.call(&["HRANDFIELD", "big", "600"]).await).len(),
        600
    );
    // An absent key, a finished cursor, the options' errors.
    assert_eq!(
        r.call(&["HSCAN", "nokey", "0"]).await,
        Frame::Array(vec![bulk("0"), Frame::Array(Vec::new())])
    );
    assert_eq!(
        r.call(&["HSCAN", "nokey", "0", "COUNT", "0"]).await,
        Frame::Array(vec![bulk("0"), Frame::Array(Vec::new())])
    );
    assert_eq!(
        r.call(&["HSCAN", "big", "0", "COUNT", "0"]).await,
        err("ERR syntax error")
    );
    assert_eq!(
        r.call(&["HSCAN", "big", "0", "FOO", "1"]).await,
        err("ERR syntax error")
    );
    assert_eq!(
        r.call(&["HSCAN", "big", "abc"]).await,
        err("ERR invalid cursor")
    );
    // Fields deleted during a scan are not returned after it; the others
    // are returned exactly once.
    let mut cursor = "0".to_string();
    let mut seen: HashSet<String> = HashSet::new();
    let mut deleted: Option<HashSet<String>> = None;
    loop {
        let reply = r.call(&["HSCAN", "big", &cursor, "COUNT", "50"]).await;
        let Frame::Array(parts) = reply else {
            panic!("HSCAN reply")
        };
        let [Frame::Bulk(next), Frame::Array(items)] = parts.as_slice() else {
            panic!("HSCAN reply")
        };
        for pair in items.chunks(2) {
            let Frame::Bulk(f) = &pair[0] else {
                panic!("HSCAN field")
            };
            let f = String::from_utf8(f.clone()).unwrap();
            if let Some(gone) = &deleted {
                assert!(!gone.contains(&f), "{f} returned after its HDEL");
            }
            assert!(seen.insert(f), "a field twice");
        }
        if deleted.is_none() {
            // After the first call: delete every field not seen yet whose
            // number ends in 7.
            let gone: HashSet<String> = (7..1000)
                .step_by(10)
                .map(|i| format!("field:{i}"))
                .filter(|f| !seen.contains(f))
                .collect();
            let mut line = vec!["HDEL", "big"];
            line.extend(gone.iter().map(String::as_str));
            assert_eq!(r.call(&line).await, int(gone.len() as i64));
            deleted = Some(gone);
        }
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    let gone = deleted.expect("a deletion");
    assert!(!gone.is_empty());
    for i in 0..1000 {
        let f = format!("field:{i}");
        assert_eq!(seen.contains(&f), !gone.contains(&f), "{f}");
    }
    assert_eq!(
        r.call(&["HLEN", "big"]).await,
        int(1000 - gone.len() as i64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_commands_treat_a_hash_as_any_key() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    // A small hash (listpack) and a large one (hashtable, past 512 rows).
    r.call(&["HSET", "small", "a", "1", "b", "2"]).await;
    assert_eq!(
        r.call(&["OBJECT", "ENCODING", "small"]).await,
        bulk("listpack")
    );
    r.call(&["HSET", "wide", "a", &"v".repeat(65)]).await;
    assert_eq!(
        r.call(&["OBJECT", "ENCODING", "wide"]).await,
        bulk("hashtable")
    );
    let mut line = vec!["HSET".to_string(), "large".to_string()];
    for i in 0..700 {
        line.push(format!("f{i}"));
        line.push(format!("{i}"));
    }
    let line: Vec<&str> = line.iter().map(String::as_str).collect();
    assert_eq!(r.call(&line).await, int(700));
    assert_eq!(
        r.call(&["OBJECT", "ENCODING", "large"]).await,
        bulk("hashtable")
    );
    assert_eq!(
        r.call(&["TYPE", "large"]).await,
        Frame::Simple("hash".into())
    );
    // SCAN TYPE hash.
    r.call(&["SET", "str", "x"]).await;
    r.call(&["SADD", "set", "x"]).await;
    let mut cursor = "0".to_string();
    let mut hashes = Vec::new();
    loop {
        let reply = r
            .call(&["SCAN", &cursor, "TYPE", "hash", "COUNT", "3"])
            .await;
        let Frame::Array(parts) = reply else {
            panic!("SCAN")
        };
        let [Frame::Bulk(next), Frame::Array(keys)] = parts.as_slice() else {
            panic!("SCAN")
        };
        hashes.extend(keys.iter().cloned());
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(sorted(Frame::Array(hashes)), ["large", "small", "wide"]);
    // RENAME moves every field (across reactors, in chunks).
    assert_eq!(r.call(&["RENAME", "large", "moved"]).await, Frame::ok());
    assert_eq!(r.call(&["EXISTS", "large"]).await, int(0));
    assert_eq!(r.call(&["HLEN", "moved"]).await, int(700));
    assert_eq!(r.call(&["HGET", "moved", "f699"]).await, bulk("699"));
    assert_eq!(r.call(&["HLEN", "large"]).await, int(0));
    assert_eq!(r.call(&["HSET", "large", "z", "1"]).await, int(1));
    assert_eq!(r.call(&["HGETALL", "large"]).await, bulks(&["z", "1"]));
    // RENAME over a hash replaces it, fields and all.
    assert_eq!(r.call(&["RENAME", "small", "large"]).await, Frame::ok());
    assert_eq!(
        pairs(r.call(&["HGETALL", "large"]).await),
        map(&[("a", "1"), ("b", "2")])
    );
    assert_eq!(r.call(&["RENAMENX", "large", "moved"]).await, int(0));
    // COPY: an independent copy.
    assert_eq!(r.call(&["COPY", "moved", "copy"]).await, int(1));
    assert_eq!(r.call(&["COPY", "moved", "copy"]).await, int(0));
    assert_eq!(r.call(&["HINCRBY", "copy", "f0", "5"]).await, int(5));
    assert_eq!(r.call(&["HGET", "moved", "f0"]).await, bulk("0"));
    assert_eq!(r.call(&["HLEN", "copy"]).await, int(700));
    assert_eq!(r.call(&["COPY", "large", "copy", "REPLACE"]).await, int(1));
    assert_eq!(r.call(&["HLEN", "copy"]).await, int(2));
    assert_eq!(r.call(&["HGET", "copy", "f0"]).await, Frame::Null);
    // DEL drops the fields: a new hash under the name starts empty.
    assert_eq!(r.call(&["DEL", "moved", "copy"]).await, int(2));
    assert_eq!(r.call(&["HSET", "moved", "only", "1"]).await, int(1));
    assert_eq!(r.call(&["HLEN", "moved"]).await, int(1));
    // EXPIRE: the deadline stays through field writes; an expired hash is
    // gone and its fields do not come back.
    assert_eq!(r.call(&["EXPIRE", "moved", "100"]).await, int(1));
    r.call(&["HSET", "moved", "two", "2"]).await;
    r.call(&["HINCRBY", "moved", "three", "3"]).await;
    r.call(&["HDEL", "moved", "two"]).await;
    match r.call(&["TTL", "moved"]).await {
        Frame::Integer(n) => assert!((90..=100).contains(&n), "TTL {n}"),
        other => panic!("TTL {other:?}"),
    }
    assert_eq!(r.call(&["PEXPIRE", "moved", "1"]).await, int(1));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(r.call(&["EXISTS", "moved"]).await, int(0));
    assert_eq!(r.call(&["HGET", "moved", "only"]).await, Frame::Null);
    assert_eq!(r.call(&["HSET", "moved", "new", "1"]).await, int(1));
    assert_eq!(r.call(&["HGETALL", "moved"]).await, bulks(&["new", "1"]));
    assert_eq!(r.call(&["TTL", "moved"]).await, int(-1));
    // FLUSHALL drops every hash.
    assert_eq!(r.call(&["FLUSHALL"]).await, Frame::ok());
    assert_eq!(r.call(&["DBSIZE"]).await, int(0));
    assert_eq!(r.call(&["HLEN", "large"]).await, int(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_exec_watch_scripts_and_resp3() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    // MULTI/EXEC of several hash commands: one transaction, replies in place.
    assert_eq!(r.call(&["MULTI"]).await, Frame::ok());
    for line in [
        &["HSET", "a", "x", "1", "y", "2"][..],
        &["HINCRBY", "a", "x", "10"],
        &["HSETNX", "b", "z", "3"],
        &["HGET", "a", "x"],
        &["HINCRBYFLOAT", "b", "z", "0.5"],
        &["HDEL", "a", "y"],
        &["HGETALL", "a"],
        &["HINCRBY", "b", "z", "1"],
        &["HLEN", "b"],
    ] {
        assert_eq!(r.call(line).await, Frame::Simple("QUEUED".into()));
    }
    assert_eq!(
        r.call(&["EXEC"]).await,
        Frame::Array(vec![
            int(2),
            int(11),
            int(1),
            bulk("11"),
            bulk("3.5"),
            int(1),
            bulks(&["x", "11"]),
            err("ERR hash value is not an integer"),
            int(1),
        ])
    );
    // WATCH: a field write aborts the EXEC; a command that changed nothing
    // does not.
    let mut other = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["WATCH", "a"]).await, Frame::ok());
    assert_eq!(other.call(&["HDEL", "a", "nofield"]).await, int(0));
    assert_eq!(other.call(&["HSETNX", "a", "x", "9"]).await, int(0));
    r.call(&["MULTI"]).await;
    r.call(&["HINCRBY", "a", "x", "1"]).await;
    assert_eq!(r.call(&["EXEC"]).await, Frame::Array(vec![int(12)]));
    assert_eq!(r.call(&["WATCH", "a"]).await, Frame::ok());
    assert_eq!(other.call(&["HSET", "a", "w", "1"]).await, int(1));
    r.call(&["MULTI"]).await;
    r.call(&["HINCRBY", "a", "x", "1"]).await;
    assert_eq!(r.call(&["EXEC"]).await, Frame::NullArray);
    assert_eq!(r.call(&["HGET", "a", "x"]).await, bulk("12"));
    // Scripts call hash commands (HGETALL comes to Lua as a flat table).
    let all = r
        .call(&[
            "EVAL",
            "redis.call('HSET', KEYS[1], 'f', ARGV[1]); \
             redis.call('HINCRBY', KEYS[1], 'n', 2); \
             return redis.call('HGETALL', KEYS[1])",
            "1",
            "s",
            "v",
        ])
        .await;
    assert_eq!(pairs(all), map(&[("f", "v"), ("n", "2")]));
    assert_eq!(
        r.call(&["EVAL", "return redis.call('HGET', KEYS[1], 'x')", "1", "s"])
            .await,
        Frame::Null
    );
    let library = "#!lua name=hashlib\n\
        redis.register_function('hbump', function(keys, args)\n\
          return redis.call('hincrby', keys[1], args[1], 1)\n\
        end)\n\
        redis.register_function{function_name = 'hread', callback = function(keys, args)\n\
          return redis.call('hget', keys[1], args[1])\n\
        end, flags = {'no-writes'}}\n";
    assert_eq!(
        r.call(&["FUNCTION", "LOAD", library]).await,
        bulk("hashlib")
    );
    assert_eq!(r.call(&["FCALL", "hbump", "1", "fh", "c"]).await, int(1));
    assert_eq!(r.call(&["FCALL", "hbump", "1", "fh", "c"]).await, int(2));
    assert_eq!(
        r.call(&["FCALL_RO", "hread", "1", "fh", "c"]).await,
        bulk("2")
    );
    assert!(r
        .call(&[
            "EVAL_RO",
            "return redis.call('HSET', KEYS[1], 'f', 'v')",
            "1",
            "ro"
        ])
        .await
        .is_error());
    assert_eq!(r.call(&["EXISTS", "ro"]).await, int(0));
    // RESP3: HGETALL is a map, HRANDFIELD WITHVALUES pairs of arrays.
    r.call(&["HELLO", "3"]).await;
    r.call(&["DEL", "m"]).await;
    r.call(&["HSET", "m", "k", "v"]).await;
    assert_eq!(
        r.call(&["HGETALL", "m"]).await,
        Frame::Map(vec![(bulk("k"), bulk("v"))])
    );
    assert_eq!(r.call(&["HGETALL", "nokey"]).await, Frame::Map(Vec::new()));
    assert_eq!(
        r.call(&["HRANDFIELD", "m", "1", "WITHVALUES"]).await,
        Frame::Array(vec![bulks(&["k", "v"])])
    );
    assert_eq!(
        r.call(&["HRANDFIELD", "m", "-2", "WITHVALUES"]).await,
        Frame::Array(vec![bulks(&["k", "v"]), bulks(&["k", "v"])])
    );
    assert_eq!(r.call(&["HRANDFIELD", "m", "-2"]).await, bulks(&["k", "k"]));
    assert_eq!(
        r.call(&["HSCAN", "m", "0"]).await,
        Frame::Array(vec![bulk("0"), bulks(&["k", "v"])])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_hincrby_on_the_same_fields() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 60;
    const FIELDS: [&str; 3] = ["a", "b", "c"];
    let server = start(config());
    let addr = server.addr();
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            let mut sums = [0i64; 3];
            for round in 0..ROUNDS {
                let i = (client + round) % FIELDS.len();
                let by = (client * 7 + round) as i64 % 11 - 3;
                let _: i64 = q(&mut c, &["HINCRBY", "counters", FIELDS[i], &by.to_string()])
                    .await
                    .expect("HINCRBY");
                sums[i] += by;
                // Now and then several fields in one transaction.
                if round % 10 == 0 {
                    let mut pipe = redis::pipe();
                    pipe.atomic();
                    for field in FIELDS {
                        pipe.cmd("HINCRBY").arg("counters").arg(field).arg(1);
                    }
                    pipe.cmd("HINCRBY").arg("other").arg("n").arg(1);
                    let _: Vec<i64> = pipe.query_async(&mut c).await.expect("MULTI");
                    for s in &mut sums {
                        *s += 1;
                    }
                }
            }
            sums
        }));
    }
    let mut expected = [0i64; 3];
    for task in tasks {
        let sums = task.await.expect("a client");
        for (e, s) in expected.iter_mut().zip(sums) {
            *e += s;
        }
    }
    let mut c = connect(addr).await;
    let all: HashMap<String, i64> = q(&mut c, &["HGETALL", "counters"]).await.unwrap();
    for (field, want) in FIELDS.iter().zip(expected) {
        assert_eq!(all.get(*field).copied(), Some(want), "field {field}");
    }
    assert_eq!(all.len(), 3);
    let other: i64 = q(&mut c, &["HGET", "other", "n"]).await.unwrap();
    assert_eq!(other, (CLIENTS * ROUNDS / 10) as i64);
}

/// Pearson's chi-square statistic of `picks` over `names`, each expected
/// equally often.
fn chi_square(picks: &[Vec<u8>], names: &[&str]) -> f64 {
    let expected = picks.len() as f64 / names.len() as f64;
    names
        .iter()
        .map(|name| {
            let seen = picks
                .iter()
                .filter(|p| p.as_slice() == name.as_bytes())
                .count() as f64;
            (seen - expected).powi(2) / expected
        })
        .sum()
}

/// HRANDFIELD, SRANDMEMBER and ZRANDMEMBER pick uniformly from a small
/// collection (Redis's "histogram distribution" tests: with 9 degrees of
/// freedom, a chi-square above 40 has probability 1e-5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_picks_are_uniform() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let names = [
        "a",
        "b",
        "c",
        "d",
        "e",
        "6",
        "7",
        "8",
        "9",
        "a-longer-name-0123456789",
    ];
    for name in names {
        r.call(&["HSET", "h", name, "v"]).await;
        r.call(&["SADD", "s", name]).await;
        r.call(&["ZADD", "z", "1", name]).await;
    }
    for (command, key) in [
        ("HRANDFIELD", "h"),
        ("SRANDMEMBER", "s"),
        ("ZRANDMEMBER", "z"),
    ] {
        let Frame::Array(many) = r.call(&[command, key, "-1000"]).await else {
            panic!("{command} answers an array");
        };
        let many: Vec<Vec<u8>> = many
            .into_iter()
            .map(|f| match f {
                Frame::Bulk(b) => b,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(many.len(), 1000);
        let chi = chi_square(&many, &names);
        assert!(chi < 40.0, "{command} -1000: chi-square {chi}");
        let mut singles = Vec::new();
        for _ in 0..500 {
            match r.call(&[command, key]).await {
                Frame::Bulk(b) => singles.push(b),
                other => panic!("{command}: {other:?}"),
            }
        }
        let chi = chi_square(&singles, &names);
        assert!(chi < 40.0, "{command} single picks: chi-square {chi}");
    }
}

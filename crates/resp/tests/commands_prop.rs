//! Random sequences of data commands (the keyspace, expiry and string
//! commands among them) with arguments drawn from what their parsers treat
//! specially (options, huge and negative numbers, globs, empty strings),
//! run as one batch each on a keyspace that keeps what earlier batches
//! left: no panic, one reply per command, every reply well-formed RESP3,
//! and the keyspace's own invariants hold afterwards (DBSIZE equals the
//! keys KEYS and a full SCAN return, each key once).

use std::sync::{Mutex, OnceLock};

use proptest::prelude::*;
use roost_resp::fuzzing::StoreHarness;
use roost_resp::protocol::{parse_frame, Frame, Limits};

const COMMANDS: &[&str] = &[
    "GET",
    "SET",
    "DEL",
    "UNLINK",
    "EXISTS",
    "TOUCH",
    "TYPE",
    "RENAME",
    "RENAMENX",
    "COPY",
    "KEYS",
    "SCAN",
    "RANDOMKEY",
    "DBSIZE",
    "FLUSHALL",
    "FLUSHDB",
    "OBJECT",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "TTL",
    "PTTL",
    "EXPIRETIME",
    "PEXPIRETIME",
    "PERSIST",
    "SETEX",
    "PSETEX",
    "GETEX",
    "SETNX",
    "GETSET",
    "GETDEL",
    "APPEND",
    "STRLEN",
    "GETRANGE",
    "SUBSTR",
    "SETRANGE",
    "MSETNX",
    "INCRBYFLOAT",
    "SETBIT",
    "GETBIT",
    "BITCOUNT",
    "BITPOS",
    "BITOP",
    "INCR",
    "INCRBY",
    "MSET",
    "MGET",
    "RPUSH",
    "LRANGE",
    "HSET",
    "HGETALL",
    "HDEL",
];

const ARGS: &[&str] = &[
    "a",
    "b",
    "c",
    "k:1",
    "",
    "0",
    "1",
    "-1",
    "2",
    "7",
    "100",
    "-100",
    "1000000",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999",
    "1.5",
    "-0.1",
    "1e400",
    "inf",
    "nan",
    "0x1p3",
    "*",
    "?",
    "[a-c]*",
    "[",
    "\\",
    "EX",
    "PX",
    "EXAT",
    "PXAT",
    "NX",
    "XX",
    "GT",
    "LT",
    "GET",
    "KEEPTTL",
    "PERSIST",
    "REPLACE",
    "DB",
    "MATCH",
    "COUNT",
    "TYPE",
    "string",
    "list",
    "BIT",
    "BYTE",
    "AND",
    "OR",
    "XOR",
    "NOT",
    "ENCODING",
    "FREQ",
    "HELP",
    "ASYNC",
    "4294967296",
    "536870912",
];

fn harness() -> &'static Mutex<StoreHarness> {
    static HARNESS: OnceLock<Mutex<StoreHarness>> = OnceLock::new();
    HARNESS.get_or_init(|| Mutex::new(StoreHarness::new()))
}

fn command() -> impl Strategy<Value = Vec<Vec<u8>>> {
    (
        prop::sample::select(COMMANDS),
        prop::collection::vec(prop::sample::select(ARGS), 0..7),
    )
        .prop_map(|(name, args)| {
            std::iter::once(name)
                .chain(args)
                .map(|a| a.as_bytes().to_vec())
                .collect()
        })
}

/// The frames of a batch's RESP3 replies (an array of one per command).
fn replies(bytes: &[u8]) -> Vec<Frame> {
    match parse_frame(bytes, &Limits::default()) {
        Ok(Some((Frame::Array(replies), used))) if used == bytes.len() => replies,
        other => panic!("replies do not parse as one array: {other:?}"),
    }
}

fn run(harness: &StoreHarness, line: &[&str]) -> Frame {
    let request = vec![line.iter().map(|a| a.as_bytes().to_vec()).collect()];
    replies(&harness.run(request).expect("the transaction runs"))
        .pop()
        .expect("one reply")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn random_commands_answer_once_each(batch in prop::collection::vec(command(), 1..12)) {
        let harness = harness().lock().unwrap_or_else(|e| e.into_inner());
        // Commands whose arity is wrong are not data commands to the
        // harness (the connection answers them): count the rest.
        let bytes = harness.run(batch).expect("the transaction runs");
        if !bytes.is_empty() {
            replies(&bytes);
        }
        // The keyspace's invariants after every batch, read in one
        // transaction (one clock: keys expiring meanwhile cannot differ).
        let request: Vec<Vec<Vec<u8>>> = [&["DBSIZE"][..], &["KEYS", "*"], &["SCAN", "0", "COUNT", "100000"]]
            .iter()
            .map(|line| line.iter().map(|a| a.as_bytes().to_vec()).collect())
            .collect();
        let frames = replies(&harness.run(request).expect("the transaction runs"));
        let size = match &frames[0] {
            Frame::Integer(n) => *n,
            other => panic!("DBSIZE: {other:?}"),
        };
        let mut keys = match &frames[1] {
            Frame::Array(keys) => keys.clone(),
            other => panic!("KEYS: {other:?}"),
        };
        let mut scanned = match &frames[2] {
            Frame::Array(parts) => match parts.as_slice() {
                [Frame::Bulk(next), Frame::Array(batch)] if next == b"0" => batch.clone(),
                other => panic!("SCAN: {other:?}"),
            },
            other => panic!("SCAN: {other:?}"),
        };
        keys.sort_by_key(|f| format!("{f:?}"));
        scanned.sort_by_key(|f| format!("{f:?}"));
        prop_assert_eq!(&keys, &scanned, "KEYS and a whole SCAN differ");
        // Expired keys count until reclaimed (this keyspace has no sweep).
        prop_assert!(keys.len() as i64 <= size, "KEYS {} > DBSIZE {}", keys.len(), size);
        // SCAN in small steps: no key twice.
        let mut stepped = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            match run(&harness, &["SCAN", &cursor, "COUNT", "3"]) {
                Frame::Array(parts) => match parts.as_slice() {
                    [Frame::Bulk(next), Frame::Array(batch)] => {
                        stepped.extend(batch.iter().map(|f| format!("{f:?}")));
                        cursor = String::from_utf8(next.clone()).unwrap();
                    }
                    other => panic!("SCAN: {other:?}"),
                },
                other => panic!("SCAN: {other:?}"),
            }
            if cursor == "0" {
                break;
            }
        }
        let stepped_count = stepped.len();
        stepped.sort();
        stepped.dedup();
        prop_assert_eq!(stepped.len(), stepped_count, "SCAN returned a key twice");
        // Now and then, empty the keyspace: the counts come back to zero
        // exactly (every key a batch added or removed was counted once).
        if size % 3 == 0 {
            let flush: Vec<Vec<Vec<u8>>> = [&["FLUSHALL"][..], &["DBSIZE"]]
                .iter()
                .map(|line| line.iter().map(|a| a.as_bytes().to_vec()).collect())
                .collect();
            let after = replies(&harness.run(flush).expect("the transaction runs"));
            prop_assert_eq!(&after[1], &Frame::Integer(0));
            prop_assert_eq!(run(&harness, &["DBSIZE"]), Frame::Integer(0));
        }
    }
}

//! Random sequences of data commands (the keyspace, expiry, string, list,
//! hash, set and sorted-set commands among them) with arguments drawn from what their
//! parsers treat specially (options, huge and negative numbers, globs,
//! empty strings, score bounds), run as one batch each on a keyspace that
//! keeps what earlier batches left: no panic, one reply per command, every
//! reply well-formed RESP3, and the keyspace's own invariants hold
//! afterwards (DBSIZE equals the keys KEYS and a full SCAN return, each key
//! once; every hash's, set's and sorted set's member rows belong to a live
//! entry of their kind and number what it says, also after expired ones are
//! swept).
//!
//! And models: sets and sorted sets of up to 1,500 members (past the
//! walks' 512-row chunks) driven by random commands whose replies must be
//! what a `BTreeSet` or a sorted `Vec` answers.

use std::sync::{Mutex, OnceLock};

use proptest::prelude::*;
use roost_resp::fuzzing::StoreHarness;
use roost_resp::protocol::{parse_frame, Frame, Limits};
use roost_resp::MemberAudit;

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
    "LPUSH",
    "LLEN",
    "LPOP",
    "RPOP",
    "LINDEX",
    "LSET",
    "LINSERT",
    "LREM",
    "LTRIM",
    "LPOS",
    "LPUSHX",
    "RPUSHX",
    "LMOVE",
    "RPOPLPUSH",
    "LMPOP",
    // Their non-blocking forms here (the connection alone waits).
    "BLPOP",
    "BRPOP",
    "BLMOVE",
    "BRPOPLPUSH",
    "BLMPOP",
    "HSET",
    "HSETNX",
    "HMSET",
    "HGET",
    "HMGET",
    "HGETALL",
    "HDEL",
    "HLEN",
    "HEXISTS",
    "HKEYS",
    "HVALS",
    "HSTRLEN",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HRANDFIELD",
    "HSCAN",
    "SADD",
    "SREM",
    "SMEMBERS",
    "SISMEMBER",
    "SMISMEMBER",
    "SCARD",
    "SPOP",
    "SRANDMEMBER",
    "SINTER",
    "SUNION",
    "SDIFF",
    "SINTERSTORE",
    "SUNIONSTORE",
    "SDIFFSTORE",
    "SINTERCARD",
    "SMOVE",
    "SSCAN",
    "ZADD",
    "ZINCRBY",
    "ZSCORE",
    "ZMSCORE",
    "ZCARD",
    "ZRANGE",
    "ZRANGESTORE",
    "ZRANGEBYSCORE",
    "ZREVRANGEBYSCORE",
    "ZREVRANGE",
    "ZRANGEBYLEX",
    "ZREVRANGEBYLEX",
    "ZRANK",
    "ZREVRANK",
    "ZREM",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
    "ZREMRANGEBYLEX",
    "ZCOUNT",
    "ZLEXCOUNT",
    "ZPOPMIN",
    "ZPOPMAX",
    "ZUNION",
    "ZINTER",
    "ZINTERCARD",
    "ZDIFF",
    "ZUNIONSTORE",
    "ZINTERSTORE",
    "ZDIFFSTORE",
    "ZSCAN",
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
    "set",
    "zset",
    "hash",
    "WITHVALUES",
    "(1",
    "(-inf",
    "+inf",
    "[a",
    "(b",
    "-",
    "+",
    "BYSCORE",
    "BYLEX",
    "REV",
    "LIMIT",
    "WITHSCORES",
    "WITHSCORE",
    "WEIGHTS",
    "AGGREGATE",
    "SUM",
    "MIN",
    "MAX",
    "CH",
    "INCR",
    "LEFT",
    "RIGHT",
    "BEFORE",
    "AFTER",
    "RANK",
    "MAXLEN",
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
        // Member rows: every one under a live collection of its kind,
        // counted by its entry, indexed; and still so once expired keys
        // are swept (now and then: PEXPIRE 1 of a set, say).
        let audit = harness.member_audit().expect("the audit runs");
        prop_assert_eq!(audit, MemberAudit::default(), "member rows out of step");
        if size % 4 == 1 {
            harness.sweep_expired().expect("the sweep runs");
            let audit = harness.member_audit().expect("the audit runs");
            prop_assert_eq!(audit, MemberAudit::default(), "member rows out of step after a sweep");
        }
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

/// A command on the model sorted set `z` (members `m0`..`m1499`).
#[derive(Debug, Clone)]
enum ZCommand {
    Add(Vec<(i64, u16)>),
    Rem(Vec<u16>),
    IncrBy(i64, u16),
    Score(u16),
    Rank(u16, bool),
    Range(i64, i64, bool),
    ByScore {
        min: i64,
        max: i64,
        exclusive: bool,
        offset: i64,
        count: i64,
        rev: bool,
    },
    Count(i64, i64),
    RemRangeByRank(i64, i64),
    Pop(bool, u64),
    Card,
}

fn member(n: u16) -> String {
    format!("m{n}")
}

fn zcommand() -> impl Strategy<Value = ZCommand> {
    let m = 0u16..1500;
    let score = -40i64..40;
    let index = prop_oneof![-1600i64..1600, -5i64..5];
    prop_oneof![
        prop::collection::vec((score.clone(), m.clone()), 1..300).prop_map(ZCommand::Add),
        prop::collection::vec(m.clone(), 1..50).prop_map(ZCommand::Rem),
        (score.clone(), m.clone()).prop_map(|(d, m)| ZCommand::IncrBy(d, m)),
        m.clone().prop_map(ZCommand::Score),
        (m.clone(), any::<bool>()).prop_map(|(m, rev)| ZCommand::Rank(m, rev)),
        (index.clone(), index.clone(), any::<bool>())
            .prop_map(|(a, b, r)| ZCommand::Range(a, b, r)),
        (
            score.clone(),
            score.clone(),
            any::<bool>(),
            -1i64..700,
            -1i64..30,
            any::<bool>()
        )
            .prop_map(
                |(min, max, exclusive, offset, count, rev)| ZCommand::ByScore {
                    min,
                    max,
                    exclusive,
                    offset,
                    count,
                    rev
                }
            ),
        (score.clone(), score).prop_map(|(a, b)| ZCommand::Count(a, b)),
        (index.clone(), index).prop_map(|(a, b)| ZCommand::RemRangeByRank(a, b)),
        (any::<bool>(), 0u64..600).prop_map(|(max, n)| ZCommand::Pop(max, n)),
        Just(ZCommand::Card),
    ]
}

/// Redis's rank range over `len` elements: inclusive, `None` when empty.
fn model_ranks(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop + len
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len).then_some((start as usize, stop as usize))
}

/// The model: members and scores, and the (score, member) order.
#[derive(Default)]
struct ZModel {
    scores: std::collections::BTreeMap<String, i64>,
}

impl ZModel {
    fn sorted(&self) -> Vec<(String, i64)> {
        let mut rows: Vec<(String, i64)> =
            self.scores.iter().map(|(m, s)| (m.clone(), *s)).collect();
        rows.sort_by(|a, b| {
            a.1.cmp(&b.1)
                .then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
        });
        rows
    }
}

fn bulk(text: &str) -> Frame {
    Frame::Bulk(text.as_bytes().to_vec())
}

fn pairs(rows: &[(String, i64)]) -> Frame {
    Frame::Array(
        rows.iter()
            .map(|(m, s)| Frame::Array(vec![bulk(m), Frame::Double(*s as f64)]))
            .collect(),
    )
}

fn members_only(rows: &[(String, i64)]) -> Frame {
    Frame::Array(rows.iter().map(|(m, _)| bulk(m)).collect())
}

/// The request a command is and the reply the model gives (updating it).
fn zstep(model: &mut ZModel, command: &ZCommand) -> (Vec<String>, Frame) {
    let key = "z".to_string();
    let mut line = Vec::new();
    let reply = match command {
        ZCommand::Add(pairs) => {
            line.extend(["ZADD".to_string(), key]);
            let mut added = 0;
            for (score, m) in pairs {
                line.extend([score.to_string(), member(*m)]);
                added += i64::from(model.scores.insert(member(*m), *score).is_none());
            }
            Frame::Integer(added)
        }
        ZCommand::Rem(members) => {
            line.extend(["ZREM".to_string(), key]);
            let mut removed = 0;
            for m in members {
                line.push(member(*m));
                removed += i64::from(model.scores.remove(&member(*m)).is_some());
            }
            Frame::Integer(removed)
        }
        ZCommand::IncrBy(by, m) => {
            line.extend(["ZINCRBY".to_string(), key, by.to_string(), member(*m)]);
            let score = model.scores.entry(member(*m)).or_insert(0);
            *score += by;
            Frame::Double(*score as f64)
        }
        ZCommand::Score(m) => {
            line.extend(["ZSCORE".to_string(), key, member(*m)]);
            model
                .scores
                .get(&member(*m))
                .map_or(Frame::Null, |s| Frame::Double(*s as f64))
        }
        ZCommand::Rank(m, rev) => {
            let name = if *rev { "ZREVRANK" } else { "ZRANK" };
            line.extend([name.to_string(), key, member(*m)]);
            let sorted = model.sorted();
            match sorted.iter().position(|(x, _)| *x == member(*m)) {
                Some(i) if *rev => Frame::Integer((sorted.len() - 1 - i) as i64),
                Some(i) => Frame::Integer(i as i64),
                None => Frame::Null,
            }
        }
        ZCommand::Range(start, stop, rev) => {
            line.extend([
                "ZRANGE".to_string(),
                key,
                start.to_string(),
                stop.to_string(),
            ]);
            if *rev {
                line.push("REV".into());
            }
            line.push("WITHSCORES".into());
            let mut sorted = model.sorted();
            if *rev {
                sorted.reverse();
            }
            match model_ranks(sorted.len(), *start, *stop) {
                Some((a, b)) => pairs(&sorted[a..=b]),
                None => Frame::Array(Vec::new()),
            }
        }
        ZCommand::ByScore {
            min,
            max,
            exclusive,
            offset,
            count,
            rev,
        } => {
            let open = if *exclusive { "(" } else { "" };
            let (low, high) = (format!("{open}{min}"), format!("{open}{max}"));
            line.extend(["ZRANGE".to_string(), key]);
            if *rev {
                line.extend([high, low, "BYSCORE".into(), "REV".into()]);
            } else {
                line.extend([low, high, "BYSCORE".into()]);
            }
            line.extend(["LIMIT".into(), offset.to_string(), count.to_string()]);
            let inside = |s: i64| {
                if *exclusive {
                    *min < s && s < *max
                } else {
                    *min <= s && s <= *max
                }
            };
            let mut rows: Vec<(String, i64)> = model
                .sorted()
                .into_iter()
                .filter(|(_, s)| inside(*s))
                .collect();
            if *rev {
                rows.reverse();
            }
            let rows: Vec<(String, i64)> = if *offset < 0 {
                Vec::new()
            } else {
                let take = if *count < 0 {
                    usize::MAX
                } else {
                    *count as usize
                };
                rows.into_iter().skip(*offset as usize).take(take).collect()
            };
            members_only(&rows)
        }
        ZCommand::Count(min, max) => {
            line.extend([
                "ZCOUNT".to_string(),
                key,
                min.to_string(),
                format!("({max}"),
            ]);
            Frame::Integer(
                model
                    .scores
                    .values()
                    .filter(|s| *min <= **s && **s < *max)
                    .count() as i64,
            )
        }
        ZCommand::RemRangeByRank(start, stop) => {
            line.extend([
                "ZREMRANGEBYRANK".to_string(),
                key,
                start.to_string(),
                stop.to_string(),
            ]);
            let sorted = model.sorted();
            match model_ranks(sorted.len(), *start, *stop) {
                Some((a, b)) => {
                    for (m, _) in &sorted[a..=b] {
                        model.scores.remove(m);
                    }
                    Frame::Integer((b - a + 1) as i64)
                }
                None => Frame::Integer(0),
            }
        }
        ZCommand::Pop(max, count) => {
            let name = if *max { "ZPOPMAX" } else { "ZPOPMIN" };
            line.extend([name.to_string(), key, count.to_string()]);
            let mut sorted = model.sorted();
            if *max {
                sorted.reverse();
            }
            sorted.truncate(*count as usize);
            for (m, _) in &sorted {
                model.scores.remove(m);
            }
            pairs(&sorted)
        }
        ZCommand::Card => {
            line.extend(["ZCARD".to_string(), key]);
            Frame::Integer(model.scores.len() as i64)
        }
    };
    (line, reply)
}

/// A command on the model sets `s0`, `s1`, `s2` (members `0`..`1199`).
#[derive(Debug, Clone)]
enum SCommand {
    Add(u8, Vec<u16>),
    Rem(u8, Vec<u16>),
    IsMember(u8, u16),
    Card(u8),
    Members(u8),
    Combine(u8, u8, u8, Option<u8>),
    Move(u8, u8, u16),
    Pop(u8, u64),
    RandomWithRepeats(u8, u16),
}

fn scommand() -> impl Strategy<Value = SCommand> {
    let key = 0u8..3;
    let m = 0u16..1200;
    prop_oneof![
        (key.clone(), prop::collection::vec(m.clone(), 1..400))
            .prop_map(|(k, v)| SCommand::Add(k, v)),
        (key.clone(), prop::collection::vec(m.clone(), 1..100))
            .prop_map(|(k, v)| SCommand::Rem(k, v)),
        (key.clone(), m.clone()).prop_map(|(k, m)| SCommand::IsMember(k, m)),
        key.clone().prop_map(SCommand::Card),
        key.clone().prop_map(SCommand::Members),
        (
            0u8..3,
            key.clone(),
            key.clone(),
            prop::option::of(key.clone())
        )
            .prop_map(|(how, a, b, store)| SCommand::Combine(how, a, b, store)),
        (key.clone(), key.clone(), m).prop_map(|(a, b, m)| SCommand::Move(a, b, m)),
        (key.clone(), 0u64..700).prop_map(|(k, n)| SCommand::Pop(k, n)),
        (key, 1u16..50).prop_map(|(k, n)| SCommand::RandomWithRepeats(k, n)),
    ]
}

type SModel = [std::collections::BTreeSet<u16>; 3];

fn sorted_bulks(frame: &Frame) -> Option<Vec<Vec<u8>>> {
    match frame {
        Frame::Set(items) | Frame::Array(items) => {
            let mut out: Vec<Vec<u8>> = items
                .iter()
                .map(|f| match f {
                    Frame::Bulk(b) => Some(b.clone()),
                    _ => None,
                })
                .collect::<Option<_>>()?;
            out.sort();
            Some(out)
        }
        _ => None,
    }
}

fn bulks_of(members: impl IntoIterator<Item = u16>) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = members
        .into_iter()
        .map(|m| m.to_string().into_bytes())
        .collect();
    out.sort();
    out
}

fn set_model_harness() -> &'static Mutex<StoreHarness> {
    static HARNESS: OnceLock<Mutex<StoreHarness>> = OnceLock::new();
    HARNESS.get_or_init(|| Mutex::new(StoreHarness::new()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn sorted_sets_answer_as_a_model(
        initial in prop::collection::vec((-40i64..40, 0u16..1500), 0..1500),
        commands in prop::collection::vec(zcommand(), 1..40),
    ) {
        let harness = set_model_harness().lock().unwrap_or_else(|e| e.into_inner());
        run(&harness, &["FLUSHALL"]);
        let mut model = ZModel::default();
        let mut all = Vec::new();
        if !initial.is_empty() {
            all.push(ZCommand::Add(initial));
        }
        all.extend(commands);
        for command in &all {
            let (line, expected) = zstep(&mut model, command);
            let line: Vec<&str> = line.iter().map(String::as_str).collect();
            let got = run(&harness, &line);
            prop_assert_eq!(&got, &expected, "{:?}", &line[..line.len().min(6)]);
        }
        let exists = run(&harness, &["EXISTS", "z"]);
        prop_assert_eq!(exists, Frame::Integer(i64::from(!model.scores.is_empty())));
        prop_assert_eq!(harness.member_audit().expect("the audit runs"), MemberAudit::default());
    }

    #[test]
    fn sets_answer_as_a_model(commands in prop::collection::vec(scommand(), 1..40)) {
        let harness = set_model_harness().lock().unwrap_or_else(|e| e.into_inner());
        run(&harness, &["FLUSHALL"]);
        let mut model: SModel = Default::default();
        let name = |k: u8| format!("s{k}");
        for command in &commands {
            match command {
                SCommand::Add(k, members) | SCommand::Rem(k, members) => {
                    let add = matches!(command, SCommand::Add(..));
                    let mut line = vec![if add { "SADD" } else { "SREM" }.to_string(), name(*k)];
                    let mut changed = 0;
                    for m in members {
                        line.push(m.to_string());
                        let set = &mut model[*k as usize];
                        changed += i64::from(if add { set.insert(*m) } else { set.remove(m) });
                    }
                    let line: Vec<&str> = line.iter().map(String::as_str).collect();
                    prop_assert_eq!(run(&harness, &line), Frame::Integer(changed));
                }
                SCommand::IsMember(k, m) => {
                    let got = run(&harness, &["SISMEMBER", &name(*k), &m.to_string()]);
                    let expected = i64::from(model[*k as usize].contains(m));
                    prop_assert_eq!(got, Frame::Integer(expected));
                }
                SCommand::Card(k) => {
                    let got = run(&harness, &["SCARD", &name(*k)]);
                    prop_assert_eq!(got, Frame::Integer(model[*k as usize].len() as i64));
                }
                SCommand::Members(k) => {
                    let got = run(&harness, &["SMEMBERS", &name(*k)]);
                    prop_assert_eq!(sorted_bulks(&got), Some(bulks_of(model[*k as usize].iter().copied())));
                }
                SCommand::Combine(how, a, b, store) => {
                    let (x, y) = (&model[*a as usize], &model[*b as usize]);
                    let result: std::collections::BTreeSet<u16> = match how {
                        0 => x.intersection(y).copied().collect(),
                        1 => x.union(y).copied().collect(),
                        _ => x.difference(y).copied().collect(),
                    };
                    let op = ["SINTER", "SUNION", "SDIFF"][*how as usize];
                    match store {
                        Some(d) => {
                            let got = run(&harness, &[&format!("{op}STORE"), &name(*d), &name(*a), &name(*b)]);
                            prop_assert_eq!(got, Frame::Integer(result.len() as i64));
                            model[*d as usize] = result;
                        }
                        None => {
                            let got = run(&harness, &[op, &name(*a), &name(*b)]);
                            prop_assert_eq!(sorted_bulks(&got), Some(bulks_of(result)));
                        }
                    }
                }
                SCommand::Move(a, b, m) => {
                    let got = run(&harness, &["SMOVE", &name(*a), &name(*b), &m.to_string()]);
                    let moved = model[*a as usize].contains(m);
                    if moved && a != b {
                        model[*a as usize].remove(m);
                        model[*b as usize].insert(*m);
                    }
                    prop_assert_eq!(got, Frame::Integer(i64::from(moved)));
                }
                SCommand::Pop(k, count) => {
                    let got = run(&harness, &["SPOP", &name(*k), &count.to_string()]);
                    let popped = sorted_bulks(&got).expect("SPOP answers members");
                    let set = &mut model[*k as usize];
                    prop_assert_eq!(popped.len(), (*count as usize).min(set.len()));
                    for m in &popped {
                        let m: u16 = std::str::from_utf8(m).unwrap().parse().unwrap();
                        prop_assert!(set.remove(&m), "SPOP gave a non-member");
                    }
                }
                SCommand::RandomWithRepeats(k, count) => {
                    let got = run(&harness, &["SRANDMEMBER", &name(*k), &format!("-{count}")]);
                    let picked = sorted_bulks(&got).expect("SRANDMEMBER answers members");
                    let set = &model[*k as usize];
                    let expected = if set.is_empty() { 0 } else { *count as usize };
                    prop_assert_eq!(picked.len(), expected);
                    for m in &picked {
                        let m: u16 = std::str::from_utf8(m).unwrap().parse().unwrap();
                        prop_assert!(set.contains(&m), "SRANDMEMBER gave a non-member");
                    }
                }
            }
        }
        for k in 0..3u8 {
            let exists = run(&harness, &["EXISTS", &name(k)]);
            prop_assert_eq!(exists, Frame::Integer(i64::from(!model[k as usize].is_empty())));
        }
        prop_assert_eq!(harness.member_audit().expect("the audit runs"), MemberAudit::default());
    }
}

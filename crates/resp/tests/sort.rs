//! SORT and SORT_RO against a real redis-server (Redis 7.0, spawned by the
//! test on a free port, `LC_ALL=C` so its ALPHA `strcoll` compares bytes):
//! the same table of commands, in order, on one connection to each, and
//! their replies compared **byte for byte** (RESP2, then a RESP3 part);
//! lines marked `s` compare an array as a multiset (a set sorted `BY
//! nosort`, which Redis answers in hash-table order). Beside the table,
//! fixed expectations of Roost's own replies (so a shared mistake would
//! still fail), MULTI/EXEC and WATCH around SORT ... STORE on both
//! servers, and a check that BY/GET read the keys their patterns name
//! inside the command's one transaction while another client rewrites
//! them. A missing redis-server fails the test: install Debian's
//! `redis-server` package (`scripts/install-deps.sh`).

mod common;

use common::redis_server::{frame_of, spawn_redis, split_args};
use common::{config, start, Raw};
use roost_resp::protocol::Frame;

/// One line of a table: `s ` (compare as a multiset) or nothing, then the
/// arguments split at spaces; `"..."` quotes, with `\xHH`, `\"` and `\\`.
fn parse_line(line: &str) -> (bool, Vec<Vec<u8>>) {
    let (as_set, rest) = match line.trim().strip_prefix("s ") {
        Some(rest) => (true, rest),
        None => (false, line.trim()),
    };
    let args = split_args(rest);
    (as_set, args)
}

/// Runs `table` on both servers and collects every difference; returns
/// Roost's replies by line, for the fixed expectations.
async fn compare(
    table: &str,
    redis: &mut Raw,
    roost: &mut Raw,
    differences: &mut Vec<String>,
) -> Vec<(String, Frame)> {
    let mut ours_by_line = Vec::new();
    for line in table.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (as_set, args) = parse_line(line);
        let theirs = redis.call_bytes(&args).await;
        let ours = roost.call_bytes(&args).await;
        let same = if as_set {
            match (frame_of(&theirs), frame_of(&ours)) {
                (Frame::Array(mut a), Frame::Array(mut b)) => {
                    let key = |f: &Frame| format!("{f:?}");
                    a.sort_by_key(key);
                    b.sort_by_key(key);
                    a == b
                }
                (a, b) => a == b,
            }
        } else {
            theirs == ours
        };
        if !same {
            differences.push(format!(
                "{line}\n    redis: {:?}\n    roost: {:?}",
                String::from_utf8_lossy(&theirs),
                String::from_utf8_lossy(&ours)
            ));
        }
        ours_by_line.push((line.to_owned(), frame_of(&ours)));
    }
    ours_by_line
}

const SORTS: &str = r#"
FLUSHALL
# Numbers (strtod: hex, exponents, a leading space, an empty element).
RPUSH nums 3 1 2 10 -5 2.5 1e2 0x10 " 7" ""
SORT nums
SORT nums ASC
SORT nums DESC
SORT_RO nums
SORT_RO nums DESC
# LIMIT: offsets and counts, negative, zero, past the end.
SORT nums LIMIT 0 3
SORT nums LIMIT 2 3 DESC
SORT nums LIMIT -1 2
SORT nums LIMIT -5 -1
SORT nums LIMIT 1 -1
SORT nums LIMIT 3 0
SORT nums LIMIT 9 5
SORT nums LIMIT 10 5
SORT nums LIMIT 100 5
SORT nums LIMIT 0 100
SORT nums LIMIT 0 2 LIMIT 1 1
SORT nums LIMIT 0 9223372036854775807
SORT nums ALPHA
SORT nums ALPHA DESC LIMIT 1 2
# Equal numbers: ordered by the elements' bytes, both ways.
RPUSH ties 1 01 1.0 1 +1 -0 0 1e0
SORT ties
SORT ties DESC
SORT ties LIMIT 2 3
# Strings: ALPHA, or the double error.
RPUSH words banana apple cherry Apple "apple pie" "" "\xff" "a\x00b"
SORT words
SORT words DESC
SORT words LIMIT 0 1
SORT_RO words
SORT words ALPHA
SORT words ALPHA DESC
SORT words ALPHA LIMIT 1 3
SORT_RO words ALPHA DESC LIMIT 0 2
RPUSH inf 1 inf -inf 0
SORT inf
SORT inf DESC
RPUSH nanlist 1 nan
SORT nanlist
RPUSH big 1 1e400
SORT big
# Redis's sort reads `errno` after strtod without clearing it first, so
# the ERANGE of 1e400 fails every later numeric SORT there until a
# command that clears it (ZADD's score parsing) runs: one does here.
ZADD errno-reset 1 x
# Sets and sorted sets.
SADD s 5 3 9 1 7 -2
SORT s
SORT s DESC LIMIT 1 2
SADD sw pear fig kiwi apple
SORT sw ALPHA
SORT sw ALPHA DESC
SORT sw
s SORT sw BY nosort
SORT sw BY nosort STORE sdst
LRANGE sdst 0 -1
SORT sw BY nosort DESC STORE sdst
LRANGE sdst 0 -1
ZADD z 3 c 1 a 2 b 2 bb 10 j -1 neg
SORT z ALPHA
SORT z ALPHA DESC LIMIT 0 3
SORT z
SORT z BY nosort
SORT z BY nosort DESC
SORT z BY nosort LIMIT 1 2
SORT z BY nosort DESC LIMIT 1 2
SORT z BY nosort LIMIT 4 10
SORT z BY nosort LIMIT 6 1
SORT z BY nosort GET #
ZADD zn 1 30 2 10 3 20
SORT zn
SORT zn DESC
SORT zn BY nosort
# BY string keys, GET keys, # and hash fields.
MSET w_3 30 w_1 10 w_2 20 w_10 -1 w_-5 5
MSET name_1 one name_2 two name_3 three
RPUSH ids 3 1 2 10 -5 4
SORT ids
SORT ids BY w_*
SORT ids BY w_* DESC
SORT ids BY w_* LIMIT 1 3
SORT ids BY w_* LIMIT 1 3 DESC
SORT ids BY w_* GET #
SORT ids BY w_* GET # GET w_* GET name_*
SORT ids BY w_* ALPHA
SORT ids BY w_* ALPHA DESC
SORT ids GET w_*
SORT ids GET nopattern
SORT ids GET # GET #
SORT_RO ids BY w_* GET name_* GET #
HSET h_1 wt 5 nm uno
HSET h_2 wt 1 nm dos
HSET h_3 wt 3 nm tres
SORT ids BY h_*->wt GET h_*->nm GET #
SORT ids BY h_*->wt DESC GET h_*->nm
SORT ids BY h_*->wt LIMIT 0 2 GET h_*->nm
SORT ids BY h_*->nope GET #
SORT ids BY w_*->wt
SORT ids GET h_*->nm GET h_*->wt GET h_*->
SORT ids BY h_*
SORT ids BY nosort
SORT ids BY nosort DESC
SORT ids BY nosort LIMIT 1 2
SORT ids BY nosort DESC LIMIT 0 3
SORT ids BY nosort GET h_*->nm
SORT ids BY nosort BY w_*
SORT ids BY w_* BY nosort
# Every weight missing: numbers tie at 0 (ordered by the elements); ALPHA
# ties keep the list's order (a stable sort, as glibc's qsort), DESC too.
SORT ids BY nokey_*
SORT ids BY nokey_* DESC
SORT ids BY nokey_* ALPHA
SORT ids BY nokey_* ALPHA DESC
SORT ids BY nokey_*->f ALPHA GET #
# A weight an INCR left (an integer value).
INCRBY wi_3 -7
INCRBY wi_1 4
SORT ids BY wi_* GET wi_*
# From scripts: the patterns' keys read as well; a set BY nosort sorted.
EVAL "return redis.call('SORT', KEYS[1], 'BY', 'w_*', 'GET', '#', 'GET', 'name_*')" 1 ids
EVAL "return redis.call('SORT', KEYS[1], 'BY', 'nosort')" 1 sw
EVAL "return redis.call('SORT', KEYS[1], 'BY', 'w_*', 'STORE', KEYS[2])" 2 ids sout
LRANGE sout 0 -1
EVAL_RO "return redis.call('SORT_RO', KEYS[1], 'DESC', 'LIMIT', 0, 2)" 1 ids
# Prefix and suffix around the element.
MSET pre_1_post a pre_2_post b
SORT ids BY nosort GET pre_*_post
# Weights that are not numbers.
SET bad_1 abc
RPUSH bl 1 2
SORT bl BY bad_*
SORT bl BY bad_* ALPHA
SORT bl BY bad_* STORE bldst
EXISTS bldst
SET bad_1 " 1"
SORT bl BY bad_* DESC
SET bad_2 ""
SORT bl BY bad_* DESC
# A missing key: an empty list.
SORT missing
SORT missing BY w_* GET #
SORT_RO missing ALPHA DESC LIMIT 0 1
# STORE: a list, replacing any type, without a TTL; an empty result deletes.
SORT ids STORE out
LRANGE out 0 -1
TYPE out
SORT ids BY w_* GET # GET name_* STORE out2
LRANGE out2 0 -1
SORT words ALPHA STORE out
LRANGE out 0 -1
SORT words STORE out
LRANGE out 0 -1
SADD sset a
SORT ids LIMIT 0 2 STORE sset
TYPE sset
LRANGE sset 0 -1
SET ttl v EX 100
SORT ids STORE ttl
TTL ttl
SET dst x
SORT missing STORE dst
EXISTS dst
SORT ids LIMIT 0 0 STORE out
EXISTS out
SORT ids STORE a STORE b
EXISTS a b
LRANGE b 0 -1
SORT ids DESC STORE ids
LRANGE ids 0 -1
# Wrong types: after the options are read.
SET str x
SORT str
SORT_RO str ALPHA
HSET hh a 1
SORT hh
SORT str FOO
# Syntax errors and arity.
SORT ids FOO
SORT ids LIMIT 1
SORT ids LIMIT a 1
SORT ids LIMIT 1 b
SORT ids LIMIT 1 1.5
SORT ids STORE
SORT ids BY
SORT ids GET
SORT ids ALPHA FOO
SORT_RO ids STORE out
SORT_RO ids STORE
SORT_RO ids LIMIT 0 1 STORE out
SORT
SORT_RO
"#;

/// After HELLO 3: nil GETs are RESP3 nulls.
const SORTS_RESP3: &str = r#"
SORT ids BY w_* GET # GET name_*
SORT_RO ids GET h_*->nm
SORT z BY nosort DESC
SORT missing
SORT ids STORE out3
"#;

fn bulks(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|i| Frame::bulk(i.as_bytes())).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_replies_match_a_real_redis_server() {
    let redis = spawn_redis().await;
    let roost = start(config());
    let mut theirs = Raw::connect(redis.addr).await;
    let mut ours = Raw::connect(roost.addr()).await;
    let mut differences = Vec::new();
    let replies = compare(SORTS, &mut theirs, &mut ours, &mut differences).await;
    let hello = ["HELLO", "3"].map(|a| a.as_bytes().to_vec());
    let (a, b) = (
        theirs.call_bytes(&hello).await,
        ours.call_bytes(&hello).await,
    );
    assert_eq!((a[0], b[0]), (b'%', b'%'), "HELLO 3 answers a map");
    compare(SORTS_RESP3, &mut theirs, &mut ours, &mut differences).await;
    assert!(
        differences.is_empty(),
        "{} SORT replies differ from redis-server's:\n{}",
        differences.len(),
        differences.join("\n")
    );

    // What Roost answered, against fixed expectations.
    let reply = |line: &str| -> &Frame {
        &replies
            .iter()
            .find(|(l, _)| l == line)
            .unwrap_or_else(|| panic!("no line {line}"))
            .1
    };
    assert_eq!(
        reply("SORT nums"),
        &bulks(&["-5", "", "1", "2", "2.5", "3", " 7", "10", "0x10", "1e2"])
    );
    assert_eq!(
        reply("SORT nums LIMIT 2 3 DESC"),
        &bulks(&["10", " 7", "3"])
    );
    assert_eq!(reply("SORT nums LIMIT 3 0"), &bulks(&[]));
    assert_eq!(
        reply("SORT ties"),
        &bulks(&["-0", "0", "+1", "01", "1", "1", "1.0", "1e0"])
    );
    assert_eq!(
        reply("SORT words"),
        &Frame::error("ERR One or more scores can't be converted into double")
    );
    assert_eq!(
        reply("SORT ids BY w_*"),
        &bulks(&["10", "4", "-5", "1", "2", "3"])
    );
    assert_eq!(
        reply("SORT ids BY w_* GET # GET w_* GET name_*"),
        &Frame::Array(
            [
                ("10", Some("-1"), None),
                ("4", None, None),
                ("-5", Some("5"), None),
                ("1", Some("10"), Some("one")),
                ("2", Some("20"), Some("two")),
                ("3", Some("30"), Some("three")),
            ]
            .iter()
            .flat_map(|(id, w, name)| {
                [
                    Frame::bulk(id.as_bytes()),
                    w.map_or(Frame::Null, |w| Frame::bulk(w.as_bytes())),
                    name.map_or(Frame::Null, |n| Frame::bulk(n.as_bytes())),
                ]
            })
            .collect()
        )
    );
    assert_eq!(
        reply("SORT ids BY h_*->wt GET h_*->nm GET #"),
        &Frame::Array(
            [
                (None, "-5"),
                (None, "10"),
                (None, "4"),
                (Some("dos"), "2"),
                (Some("tres"), "3"),
                (Some("uno"), "1"),
            ]
            .iter()
            .flat_map(|(nm, id)| {
                [
                    nm.map_or(Frame::Null, |n| Frame::bulk(n.as_bytes())),
                    Frame::bulk(id.as_bytes()),
                ]
            })
            .collect()
        )
    );
    assert_eq!(
        reply("SORT z BY nosort DESC LIMIT 1 2"),
        &bulks(&["c", "bb"])
    );
    assert_eq!(
        reply("SORT ids BY nosort DESC"),
        &bulks(&["4", "-5", "10", "2", "1", "3"])
    );
    assert_eq!(
        reply("SORT ids BY w_* GET # GET name_* STORE out2"),
        &Frame::Integer(12)
    );
    assert_eq!(
        reply("LRANGE out2 0 -1"),
        &bulks(&["10", "", "4", "", "-5", "", "1", "one", "2", "two", "3", "three"])
    );
    assert_eq!(reply("SORT missing STORE dst"), &Frame::Integer(0));
    assert_eq!(reply("EXISTS dst"), &Frame::Integer(0));
    assert_eq!(reply("TYPE sset"), &Frame::Simple("list".into()));
    assert_eq!(reply("TTL ttl"), &Frame::Integer(-1));
    assert_eq!(
        reply("SORT str"),
        &Frame::error("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(reply("SORT str FOO"), &Frame::error("ERR syntax error"));
    assert_eq!(
        reply("SORT_RO ids STORE out"),
        &Frame::error("ERR syntax error")
    );
    assert_eq!(
        reply("SORT ids LIMIT a 1"),
        &Frame::error("ERR value is not an integer or out of range")
    );
    assert_eq!(
        reply("SORT"),
        &Frame::error("ERR wrong number of arguments for 'sort' command")
    );
    assert_eq!(
        reply("SORT_RO"),
        &Frame::error("ERR wrong number of arguments for 'sort_ro' command")
    );
    assert_eq!(
        reply("SORT bl BY bad_* STORE bldst"),
        &Frame::error("ERR One or more scores can't be converted into double")
    );
    assert_eq!(reply("EXISTS bldst"), &Frame::Integer(0));
}

/// MULTI/EXEC with SORT ... STORE, and WATCH of a destination: the same
/// replies on both servers, and the ones expected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_store_in_multi_and_under_watch() {
    let redis = spawn_redis().await;
    let roost = start(config());
    let mut outcomes = Vec::new();
    for addr in [redis.addr, roost.addr()] {
        let mut a = Raw::connect(addr).await;
        let mut b = Raw::connect(addr).await;
        let mut seen = Vec::new();
        for line in [
            "FLUSHALL",
            "RPUSH src 3 1 2",
            "MSET w_1 9 w_2 8 w_3 7",
            "MULTI",
            "SORT src BY w_* STORE dst",
            "LRANGE dst 0 -1",
            "SORT_RO dst",
            "EXEC",
        ] {
            seen.push(a.call(&line.split(' ').collect::<Vec<_>>()).await);
        }
        // Another client's SORT STORE to a watched key aborts the EXEC.
        seen.push(a.call(&["WATCH", "dst"]).await);
        seen.push(b.call(&["SORT", "src", "STORE", "dst"]).await);
        seen.push(a.call(&["MULTI"]).await);
        seen.push(a.call(&["SET", "marker", "1"]).await);
        seen.push(a.call(&["EXEC"]).await);
        seen.push(a.call(&["EXISTS", "marker"]).await);
        // Storing an empty result deletes a watched destination: aborted.
        seen.push(a.call(&["WATCH", "dst"]).await);
        seen.push(b.call(&["SORT", "nokey", "STORE", "dst"]).await);
        seen.push(a.call(&["MULTI"]).await);
        seen.push(a.call(&["SET", "marker", "1"]).await);
        seen.push(a.call(&["EXEC"]).await);
        // Storing nothing over nothing changes nothing: the EXEC runs.
        seen.push(a.call(&["WATCH", "dst"]).await);
        seen.push(b.call(&["SORT", "nokey", "STORE", "dst"]).await);
        seen.push(a.call(&["MULTI"]).await);
        seen.push(a.call(&["SET", "marker", "2"]).await);
        seen.push(a.call(&["EXEC"]).await);
        // SORT_RO of a watched key (a read) does not abort.
        seen.push(a.call(&["WATCH", "src"]).await);
        seen.push(b.call(&["SORT_RO", "src", "DESC"]).await);
        seen.push(a.call(&["MULTI"]).await);
        seen.push(a.call(&["GET", "marker"]).await);
        seen.push(a.call(&["EXEC"]).await);
        outcomes.push(seen);
    }
    let (theirs, ours) = (&outcomes[0], &outcomes[1]);
    assert_eq!(theirs, ours, "Redis's replies, then Roost's");
    let queued = Frame::Simple("QUEUED".into());
    assert_eq!(ours[3], Frame::ok());
    assert_eq!(
        &ours[4..7],
        &[queued.clone(), queued.clone(), queued.clone()]
    );
    assert_eq!(
        ours[7],
        Frame::Array(vec![
            Frame::Integer(3),
            bulks(&["3", "2", "1"]),
            bulks(&["1", "2", "3"]),
        ])
    );
    assert_eq!(ours[9], Frame::Integer(3));
    assert_eq!(
        ours[12],
        Frame::NullArray,
        "WATCH of dst aborted by SORT STORE"
    );
    assert_eq!(ours[13], Frame::Integer(0));
    assert_eq!(ours[15], Frame::Integer(0));
    assert_eq!(ours[18], Frame::NullArray, "deleting dst aborts too");
    assert_eq!(ours[23], Frame::Array(vec![Frame::ok()]));
    assert_eq!(ours[28], Frame::Array(vec![Frame::bulk("2")]));
}

/// BY and GET read the keys their patterns name inside the command's one
/// transaction: while a writer rewrites every weight and value together
/// (MSET, one transaction), each SORT sees all of them from one write,
/// whatever reactors they hash to (8 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_reads_pattern_keys_in_its_transaction() {
    let roost = start(config());
    let addr = roost.addr();
    let ids: Vec<String> = (0..16).map(|i| i.to_string()).collect();
    let mut setup = Raw::connect(addr).await;
    let mut push = vec!["RPUSH", "ids"];
    push.extend(ids.iter().map(String::as_str));
    assert_eq!(setup.call(&push).await, Frame::Integer(16));
    // The writer goes on until the reader has checked `CHECKS` sorts.
    const CHECKS: usize = 300;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = std::sync::Arc::clone(&stop);
    let writer = tokio::spawn(async move {
        let mut con = Raw::connect(addr).await;
        let mut round = 0usize;
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            let mut args = vec!["MSET".to_owned()];
            for i in 0..16 {
                // Weights order the ids one way on even rounds, the other
                // way on odd ones; every value names the round.
                let weight = if round % 2 == 0 { i } else { 100 - i };
                args.extend([format!("w_{i}"), weight.to_string()]);
                args.extend([format!("v_{i}"), format!("r{round}")]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(con.call(&args).await, Frame::ok());
            round += 1;
        }
        round
    });
    let mut reader = Raw::connect(addr).await;
    let ascending: Vec<Frame> = (0..16).map(|i| Frame::bulk(i.to_string())).collect();
    let descending: Vec<Frame> = ascending.iter().rev().cloned().collect();
    let mut rounds_seen = std::collections::BTreeSet::new();
    let mut checked = 0;
    while checked < CHECKS {
        let reply = reader
            .call(&["SORT", "ids", "BY", "w_*", "GET", "#", "GET", "v_*"])
            .await;
        let Frame::Array(items) = reply else {
            panic!("{reply:?}");
        };
        assert_eq!(items.len(), 32);
        let order: Vec<Frame> = items.iter().step_by(2).cloned().collect();
        let values: Vec<&Frame> = items.iter().skip(1).step_by(2).collect();
        if values.iter().all(|v| **v == Frame::Null) {
            // Before the first MSET: no weights or values yet.
            tokio::task::yield_now().await;
            continue;
        }
        assert!(
            values.iter().all(|v| *v == values[0]),
            "values from different writes: {values:?}"
        );
        let Frame::Bulk(round) = values[0] else {
            panic!("{values:?}");
        };
        let round: usize = String::from_utf8_lossy(&round[1..]).parse().unwrap();
        let expected = if round % 2 == 0 {
            &ascending
        } else {
            &descending
        };
        assert_eq!(&order, expected, "round {round}: order from other weights");
        rounds_seen.insert(round);
        checked += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.await.unwrap();
    assert!(
        rounds_seen.len() > 1,
        "the sorts ran beside the writes: {} rounds written, {:?} seen",
        rounds,
        rounds_seen.len()
    );
}

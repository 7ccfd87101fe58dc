//! The server driven by real clients on an ephemeral port: the `redis` crate
//! (commands, pipelines, MULTI/EXEC, WATCH, concurrency, AUTH) and a raw
//! socket client (exact error texts, limits, RESP3, partial frames).

mod common;

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use common::{config, connect, err, q, start, Raw};
use roost_resp::protocol::Frame;
use roost_resp::{Access, User};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strings_lists_hashes_and_counters() {
    let server = start(config());
    let mut c = connect(server.addr()).await;
    assert_eq!(q::<String>(&mut c, &["PING"]).await.unwrap(), "PONG");
    assert_eq!(
        q::<String>(&mut c, &["SET", "s", "hello"]).await.unwrap(),
        "OK"
    );
    assert_eq!(
        q::<Option<String>>(&mut c, &["GET", "s"]).await.unwrap(),
        Some("hello".into())
    );
    assert_eq!(
        q::<Option<String>>(&mut c, &["GET", "nope"]).await.unwrap(),
        None
    );
    // SET options.
    assert_eq!(
        q::<Option<String>>(&mut c, &["SET", "s", "x", "NX"])
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        q::<Option<String>>(&mut c, &["SET", "new", "x", "XX"])
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        q::<Option<String>>(&mut c, &["SET", "s", "world", "GET"])
            .await
            .unwrap(),
        Some("hello".into())
    );
    assert_eq!(
        q::<Option<String>>(&mut c, &["SET", "n", "1", "NX", "GET"])
            .await
            .unwrap(),
        None
    );
    // Integers.
    assert_eq!(q::<i64>(&mut c, &["INCR", "n"]).await.unwrap(), 2);
    assert_eq!(q::<i64>(&mut c, &["INCRBY", "n", "40"]).await.unwrap(), 42);
    assert_eq!(q::<i64>(&mut c, &["DECRBY", "n", "2"]).await.unwrap(), 40);
    assert_eq!(q::<i64>(&mut c, &["DECR", "fresh"]).await.unwrap(), -1);
    assert_eq!(
        q::<String>(&mut c, &["MSET", "a", "1", "b", "2"])
            .await
            .unwrap(),
        "OK"
    );
    assert_eq!(
        q::<Vec<Option<String>>>(&mut c, &["MGET", "a", "b", "zz"])
            .await
            .unwrap(),
        vec![Some("1".into()), Some("2".into()), None]
    );
    assert_eq!(
        q::<i64>(&mut c, &["EXISTS", "a", "b", "zz", "a"])
            .await
            .unwrap(),
        3
    );
    assert_eq!(q::<i64>(&mut c, &["DEL", "a", "zz"]).await.unwrap(), 1);
    // Lists.
    assert_eq!(
        q::<i64>(&mut c, &["RPUSH", "l", "b", "c"]).await.unwrap(),
        2
    );
    assert_eq!(q::<i64>(&mut c, &["LPUSH", "l", "a"]).await.unwrap(), 3);
    assert_eq!(
        q::<Vec<String>>(&mut c, &["LRANGE", "l", "0", "-1"])
            .await
            .unwrap(),
        vec!["a", "b", "c"]
    );
    assert_eq!(
        q::<Vec<String>>(&mut c, &["LRANGE", "l", "-2", "10"])
            .await
            .unwrap(),
        vec!["b", "c"]
    );
    assert_eq!(q::<i64>(&mut c, &["LLEN", "l"]).await.unwrap(), 3);
    // Hashes.
    assert_eq!(
        q::<i64>(&mut c, &["HSET", "h", "f1", "v1", "f2", "v2"])
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        q::<i64>(&mut c, &["HSET", "h", "f1", "v1b"]).await.unwrap(),
        0
    );
    assert_eq!(
        q::<Option<String>>(&mut c, &["HGET", "h", "f1"])
            .await
            .unwrap(),
        Some("v1b".into())
    );
    let all: std::collections::HashMap<String, String> =
        q(&mut c, &["HGETALL", "h"]).await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(
        q::<i64>(&mut c, &["HDEL", "h", "f1", "f9"]).await.unwrap(),
        1
    );
    assert_eq!(q::<i64>(&mut c, &["HDEL", "h", "f2"]).await.unwrap(), 1);
    assert_eq!(
        q::<i64>(&mut c, &["EXISTS", "h"]).await.unwrap(),
        0,
        "an emptied hash is deleted"
    );
    // Bounded counters: a stock that may not go below 0.
    assert_eq!(
        q::<String>(&mut c, &["BC.CREATE", "stock", "LOWER", "0", "10"])
            .await
            .unwrap(),
        "OK"
    );
    assert_eq!(
        q::<i64>(&mut c, &["BC.DEC", "stock", "4"]).await.unwrap(),
        6
    );
    let over = q::<i64>(&mut c, &["BC.DEC", "stock", "7", "GLOBAL"])
        .await
        .unwrap_err();
    assert_eq!(over.code(), Some("BOUND"), "{over}");
    assert_eq!(
        q::<i64>(&mut c, &["BC.INC", "stock", "5", "LOCAL"])
            .await
            .unwrap(),
        11
    );
    assert_eq!(q::<i64>(&mut c, &["BC.GET", "stock"]).await.unwrap(), 11);
    assert_eq!(
        q::<String>(&mut c, &["BC.CREATE", "cap", "UPPER", "3"])
            .await
            .unwrap(),
        "OK"
    );
    assert_eq!(q::<i64>(&mut c, &["BC.DEC", "cap", "2"]).await.unwrap(), 1);
    assert_eq!(q::<i64>(&mut c, &["BC.INC", "cap", "2"]).await.unwrap(), 3);
    assert!(q::<i64>(&mut c, &["BC.INC", "cap", "1"]).await.is_err());
    // Types.
    let wrong = q::<i64>(&mut c, &["LLEN", "s"]).await.unwrap_err();
    assert_eq!(wrong.code(), Some("WRONGTYPE"));
    assert!(q::<i64>(&mut c, &["INCR", "s"]).await.is_err());
    assert!(q::<i64>(&mut c, &["GET", "stock"]).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_error_texts() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(
        r.call(&["FOO", "a", "b"]).await,
        err("ERR unknown command 'FOO', with args beginning with: 'a' 'b' ")
    );
    assert_eq!(
        r.call(&["get"]).await,
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(
        r.call(&["GET", "a", "b"]).await,
        err("ERR wrong number of arguments for 'get' command")
    );
    r.call(&["RPUSH", "list", "x"]).await;
    assert_eq!(
        r.call(&["GET", "list"]).await,
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    r.call(&["SET", "s", "abc"]).await;
    assert_eq!(
        r.call(&["INCR", "s"]).await,
        err("ERR value is not an integer or out of range")
    );
    r.call(&["SET", "big", "9223372036854775807"]).await;
    assert_eq!(
        r.call(&["INCR", "big"]).await,
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(
        r.call(&["SET", "k", "v", "BOGUS"]).await,
        err("ERR syntax error")
    );
    assert_eq!(
        r.call(&["SELECT", "1"]).await,
        err("ERR DB index is out of range")
    );
    assert_eq!(r.call(&["SELECT", "0"]).await, Frame::Simple("OK".into()));
    assert_eq!(r.call(&["EXEC"]).await, err("ERR EXEC without MULTI"));
    assert_eq!(r.call(&["DISCARD"]).await, err("ERR DISCARD without MULTI"));
    assert_eq!(
        r.call(&["MSET", "a", "1", "b"]).await,
        err("ERR wrong number of arguments for 'mset' command")
    );
    for (args, what) in [
        (&["SUBSCRIBE", "ch"][..], "pub/sub"),
        (&["PUBLISH", "ch", "m"][..], "pub/sub"),
    ] {
        match r.call(args).await {
            Frame::Error(text) => {
                assert!(text.contains(&format!("{what} is not supported")), "{text}")
            }
            other => panic!("{args:?}: {other:?}"),
        }
    }
    // Connection commands.
    assert_eq!(r.call(&["ECHO", "hi"]).await, Frame::bulk("hi"));
    assert_eq!(r.call(&["PING", "x"]).await, Frame::bulk("x"));
    assert_eq!(r.call(&["CLIENT", "GETNAME"]).await, Frame::Null);
    assert_eq!(
        r.call(&["CLIENT", "SETNAME", "worker-1"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(
        r.call(&["CLIENT", "GETNAME"]).await,
        Frame::bulk("worker-1")
    );
    assert_eq!(
        r.call(&["CLIENT", "SETNAME", "a b"]).await,
        err("ERR Client names cannot contain spaces, newlines or special characters.")
    );
    assert!(matches!(r.call(&["COMMAND", "COUNT"]).await, Frame::Integer(n) if n > 30));
    assert!(matches!(r.call(&["COMMAND", "DOCS"]).await, Frame::Array(a) if !a.is_empty()));
    match r.call(&["INFO"]).await {
        Frame::Bulk(text) => {
            let text = String::from_utf8(text).unwrap();
            for needle in [
                "# Server",
                "# Clients",
                "# Stats",
                "# Latency",
                "total_commands_processed:",
                "roost_transactions:",
                "roost_watch_aborts:",
                "roost_transaction_p99_us:",
            ] {
                assert!(text.contains(needle), "INFO lacks {needle}: {text}");
            }
        }
        other => panic!("INFO: {other:?}"),
    }
    match r.call(&["INFO", "clients"]).await {
        Frame::Bulk(text) => {
            let text = String::from_utf8(text).unwrap();
            assert!(
                text.contains("connected_clients:1") && !text.contains("# Stats"),
                "{text}"
            );
        }
        other => panic!("INFO clients: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_after_hello() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(
        r.call(&["HELLO", "4"]).await,
        err("NOPROTO unsupported protocol version")
    );
    match r.call(&["HELLO", "3"]).await {
        Frame::Map(pairs) => assert!(pairs.contains(&(Frame::bulk("proto"), Frame::Integer(3)))),
        other => panic!("HELLO 3: {other:?}"),
    }
    assert_eq!(r.call(&["GET", "missing"]).await, Frame::Null);
    r.call(&["HSET", "h", "f", "v"]).await;
    assert_eq!(
        r.call(&["HGETALL", "h"]).await,
        Frame::Map(vec![(Frame::bulk("f"), Frame::bulk("v"))])
    );
    assert!(matches!(
        r.call(&["INFO", "server"]).await,
        Frame::Verbatim { .. }
    ));
    match r.call(&["HELLO", "2"]).await {
        Frame::Array(items) => assert_eq!(items.len(), 14),
        other => panic!("HELLO 2: {other:?}"),
    }
    assert_eq!(
        r.call(&["HGETALL", "h"]).await,
        Frame::Array(vec![Frame::bulk("f"), Frame::bulk("v")])
    );
    // The redis crate speaking RESP3.
    let client = redis::Client::open(format!("redis://{}/?protocol=resp3", server.addr())).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    assert_eq!(q::<String>(&mut c, &["SET", "k", "v"]).await.unwrap(), "OK");
    assert_eq!(
        q::<Option<String>>(&mut c, &["GET", "k"]).await.unwrap(),
        Some("v".into())
    );
    assert_eq!(
        q::<Option<String>>(&mut c, &["GET", "nothing"])
            .await
            .unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_pipelines_reply_in_order() {
    let server = start(config());
    let mut c = connect(server.addr()).await;
    const N: usize = 5000;
    let mut pipe = redis::pipe();
    for i in 0..N {
        pipe.cmd("SET").arg(format!("p{i}")).arg(i);
        pipe.cmd("INCR").arg(format!("p{i}"));
        pipe.cmd("GET").arg(format!("p{i}"));
    }
    let replies: Vec<redis::Value> = pipe.query_async(&mut c).await.unwrap();
    assert_eq!(replies.len(), 3 * N);
    for i in 0..N {
        assert_eq!(replies[3 * i + 1], redis::Value::Int(i as i64 + 1));
        assert_eq!(
            replies[3 * i + 2],
            redis::Value::BulkString((i + 1).to_string().into_bytes())
        );
    }
    // A pipeline with an error in the middle keeps going.
    let results: Vec<redis::RedisResult<redis::Value>> = redis::pipe()
        .ignore_errors()
        .cmd("SET")
        .arg("x")
        .arg("1")
        .cmd("LPUSH")
        .arg("x")
        .arg("y")
        .cmd("INCR")
        .arg("x")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok());
    assert_eq!(results[1].as_ref().unwrap_err().code(), Some("WRONGTYPE"));
    assert_eq!(results[2].as_ref().unwrap(), &redis::Value::Int(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_frames_byte_by_byte() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let wire = b"*3\r\n$3\r\nSET\r\n$4\r\nslow\r\n$5\r\nvalue\r\n*2\r\n$3\r\nGET\r\n$4\r\nslow\r\nPING\r\n";
    for b in wire.iter() {
        r.send(std::slice::from_ref(b)).await;
        r.stream.flush().await.unwrap();
    }
    assert_eq!(r.frame().await, Some(Frame::Simple("OK".into())));
    assert_eq!(r.frame().await, Some(Frame::bulk("value")));
    assert_eq!(r.frame().await, Some(Frame::Simple("PONG".into())));
    // Inline commands with quotes.
    r.send(b"SET q \"two words\\n\"\r\nGET q\r\n").await;
    assert_eq!(r.frame().await, Some(Frame::Simple("OK".into())));
    assert_eq!(r.frame().await, Some(Frame::bulk("two words\n")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_exec_is_one_transaction() {
    let server = start(config());
    let mut c = connect(server.addr()).await;
    let (x, y, keys): (i64, i64, Vec<Option<String>>) = redis::pipe()
        .atomic()
        .cmd("INCRBY")
        .arg("acct:a")
        .arg(10)
        .cmd("INCRBY")
        .arg("acct:b")
        .arg(-10)
        .cmd("MGET")
        .arg("acct:a")
        .arg("acct:b")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((x, y), (10, -10));
    assert_eq!(keys, vec![Some("10".into()), Some("-10".into())]);

    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["MULTI"]).await, Frame::Simple("OK".into()));
    assert_eq!(
        r.call(&["MULTI"]).await,
        err("ERR MULTI calls can not be nested")
    );
    assert_eq!(
        r.call(&["SET", "m", "1"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(r.call(&["LLEN", "m"]).await, Frame::Simple("QUEUED".into()));
    assert_eq!(r.call(&["PING"]).await, Frame::Simple("QUEUED".into()));
    match r.call(&["EXEC"]).await {
        Frame::Array(replies) => {
            assert_eq!(replies[0], Frame::Simple("OK".into()));
            assert!(replies[1].is_error(), "a runtime error stays in its place");
            assert_eq!(replies[2], Frame::Simple("PONG".into()));
        }
        other => panic!("EXEC: {other:?}"),
    }
    // A rejected command (unknown, arity) dooms the EXEC.
    r.call(&["MULTI"]).await;
    r.call(&["SET", "m", "2"]).await;
    assert!(r.call(&["NOSUCH"]).await.is_error());
    assert_eq!(
        r.call(&["EXEC"]).await,
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    assert_eq!(r.call(&["GET", "m"]).await, Frame::bulk("1"));
    // SAVE, BGSAVE and SHUTDOWN are refused by name inside MULTI (Redis's
    // no-multi), which dooms the EXEC; outside it they say why not.
    for refused in ["SAVE", "BGSAVE", "SHUTDOWN"] {
        r.call(&["MULTI"]).await;
        r.call(&["SET", "m", "2"]).await;
        assert_eq!(
            r.call(&[refused]).await,
            err("ERR Command not allowed inside a transaction")
        );
        assert_eq!(
            r.call(&["EXEC"]).await,
            err("EXECABORT Transaction discarded because of previous errors.")
        );
        assert_eq!(r.call(&["GET", "m"]).await, Frame::bulk("1"));
        let Frame::Error(why) = r.call(&[refused]).await else {
            panic!("{refused} outside MULTI is refused");
        };
        assert!(why.contains("roost") || why.contains("SIGTERM"), "{why}");
    }
    // DISCARD drops the queue.
    r.call(&["MULTI"]).await;
    r.call(&["SET", "m", "3"]).await;
    assert_eq!(r.call(&["DISCARD"]).await, Frame::Simple("OK".into()));
    assert_eq!(r.call(&["GET", "m"]).await, Frame::bulk("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_aborts_exec_when_a_key_changed() {
    let server = start(config());
    let mut a = Raw::connect(server.addr()).await;
    let mut b = Raw::connect(server.addr()).await;
    a.call(&["SET", "w", "1"]).await;
    // Unchanged: EXEC runs.
    assert_eq!(
        a.call(&["WATCH", "w", "absent"]).await,
        Frame::Simple("OK".into())
    );
    a.call(&["MULTI"]).await;
    a.call(&["INCR", "w"]).await;
    assert_eq!(
        a.call(&["EXEC"]).await,
        Frame::Array(vec![Frame::Integer(2)])
    );
    // Changed by another client: EXEC answers nil and applies nothing.
    a.call(&["WATCH", "w"]).await;
    b.call(&["SET", "w", "100"]).await;
    a.call(&["MULTI"]).await;
    a.call(&["INCR", "w"]).await;
    assert_eq!(a.call(&["EXEC"]).await, Frame::NullArray);
    assert_eq!(a.call(&["GET", "w"]).await, Frame::bulk("100"));
    // Set to the same value again still counts as a change (stamps, not values).
    a.call(&["WATCH", "w"]).await;
    b.call(&["SET", "w", "100"]).await;
    a.call(&["MULTI"]).await;
    a.call(&["SET", "w", "0"]).await;
    assert_eq!(a.call(&["EXEC"]).await, Frame::NullArray);
    // A watched absent key that appears.
    a.call(&["WATCH", "ghost"]).await;
    b.call(&["SET", "ghost", "boo"]).await;
    a.call(&["MULTI"]).await;
    a.call(&["SET", "ghost", "mine"]).await;
    assert_eq!(a.call(&["EXEC"]).await, Frame::NullArray);
    // EXEC forgets the watch; UNWATCH too.
    a.call(&["WATCH", "w"]).await;
    assert_eq!(a.call(&["UNWATCH"]).await, Frame::Simple("OK".into()));
    b.call(&["SET", "w", "5"]).await;
    a.call(&["MULTI"]).await;
    a.call(&["GET", "w"]).await;
    assert_eq!(
        a.call(&["EXEC"]).await,
        Frame::Array(vec![Frame::bulk("5")])
    );
    match a.call(&["INFO", "stats"]).await {
        Frame::Bulk(text) => assert!(String::from_utf8(text)
            .unwrap()
            .contains("roost_watch_aborts:3")),
        other => panic!("{other:?}"),
    }
}

/// Concurrent MULTI/EXEC transfers between accounts conserve the total, and
/// concurrent INCRs lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_conserve_the_total() {
    let server = start(config());
    const ACCOUNTS: usize = 10;
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 200;
    let mut setup = connect(server.addr()).await;
    for i in 0..ACCOUNTS {
        q::<String>(&mut setup, &["SET", &format!("acct{i}"), "100"])
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let addr = server.addr();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            for round in 0..ROUNDS {
                let from = (client + round) % ACCOUNTS;
                let to = (client * 7 + round * 3 + 1) % ACCOUNTS;
                let amount = (round % 5 + 1) as i64;
                let _: (i64, i64) = redis::pipe()
                    .atomic()
                    .cmd("DECRBY")
                    .arg(format!("acct{from}"))
                    .arg(amount)
                    .cmd("INCRBY")
                    .arg(format!("acct{to}"))
                    .arg(amount)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let _: i64 = q(&mut c, &["INCR", "hits"]).await.unwrap();
                if round % 20 == 0 {
                    // A whole-bank read inside one transaction sums to the total.
                    let keys: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct{i}")).collect();
                    let (values,): (Vec<i64>,) = redis::pipe()
                        .atomic()
                        .cmd("MGET")
                        .arg(&keys)
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    assert_eq!(values.iter().sum::<i64>(), 100 * ACCOUNTS as i64);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let keys: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct{i}")).collect();
    let values: Vec<i64> = redis::cmd("MGET")
        .arg(&keys)
        .query_async(&mut setup)
        .await
        .unwrap();
    assert_eq!(values.iter().sum::<i64>(), 100 * ACCOUNTS as i64);
    assert_eq!(
        q::<i64>(&mut setup, &["GET", "hits"]).await.unwrap(),
        (CLIENTS * ROUNDS) as i64
    );
}

/// Concurrent SMOVEs between sets (on several reactors) and ZINCRBYs of
/// one sorted set: no member lost or in two sets, every increment counted,
/// and a SUNION/ZSCORE read inside a transaction sees a whole state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_set_moves_and_score_increments() {
    let server = start(config());
    const SETS: usize = 5;
    const MEMBERS: usize = 60;
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 150;
    let mut setup = connect(server.addr()).await;
    let members: Vec<String> = (0..MEMBERS).map(|m| format!("m{m}")).collect();
    let mut sadd = redis::cmd("SADD");
    sadd.arg("set0").arg(&members);
    let added: i64 = sadd.query_async(&mut setup).await.unwrap();
    assert_eq!(added, MEMBERS as i64);
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let addr = server.addr();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            for round in 0..ROUNDS {
                let from = (client + round) % SETS;
                let to = (client * 3 + round * 7 + 1) % SETS;
                let member = format!("m{}", (client * 13 + round * 11) % MEMBERS);
                let _: i64 = q(
                    &mut c,
                    &["SMOVE", &format!("set{from}"), &format!("set{to}"), &member],
                )
                .await
                .unwrap();
                let _: f64 = q(&mut c, &["ZINCRBY", "scores", "1", &member])
                    .await
                    .unwrap();
                if round % 25 == 0 {
                    let keys: Vec<String> = (0..SETS).map(|i| format!("set{i}")).collect();
                    let (union, card): (Vec<String>, i64) = redis::pipe()
                        .atomic()
                        .cmd("SUNION")
                        .arg(&keys)
                        .cmd("SCARD")
                        .arg("set0")
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    assert_eq!(union.len(), MEMBERS);
                    assert!(card <= MEMBERS as i64);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut total = 0;
    let mut seen = std::collections::HashSet::new();
    for i in 0..SETS {
        let set: Vec<String> = q(&mut setup, &["SMEMBERS", &format!("set{i}")])
            .await
            .unwrap();
        total += set.len();
        seen.extend(set);
    }
    assert_eq!((total, seen.len()), (MEMBERS, MEMBERS));
    let scores: Vec<(String, f64)> = q(&mut setup, &["ZRANGE", "scores", "0", "-1", "WITHSCORES"])
        .await
        .unwrap();
    let sum: f64 = scores.iter().map(|(_, s)| s).sum();
    assert_eq!(sum, (CLIENTS * ROUNDS) as f64);
    // Ascending by score, as the index keeps them.
    assert!(scores.windows(2).all(|w| w[0].1 <= w[1].1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_input_is_refused_and_others_keep_working() {
    let mut cfg = config();
    cfg.max_bulk_bytes = 1024;
    cfg.max_array_len = 16;
    cfg.max_inline_bytes = 256;
    cfg.max_request_bytes = 2048;
    let server = start(cfg);
    let mut good = connect(server.addr()).await;
    let mut three_bulks = b"*3\r\n".to_vec();
    for _ in 0..3 {
        three_bulks.extend_from_slice(b"$1000\r\n");
        three_bulks.extend_from_slice(&[b'v'; 1000]);
        three_bulks.extend_from_slice(b"\r\n");
    }
    let cases: [(&[u8], &str); 6] = [
        (
            &three_bulks,
            "ERR Protocol error: query buffer limit exceeded",
        ),
        (b"*17\r\n", "ERR Protocol error: invalid multibulk length"),
        (
            b"*1\r\n$1025\r\n",
            "ERR Protocol error: invalid bulk length",
        ),
        (b"*1\r\n$-5\r\n", "ERR Protocol error: invalid bulk length"),
        (
            b"*1\r\n+PING\r\n",
            "ERR Protocol error: expected '$', got '+'",
        ),
        (&[b'x'; 300], "ERR Protocol error: too big inline request"),
    ];
    for (input, expected) in cases {
        let mut bad = Raw::connect(server.addr()).await;
        bad.send(input).await;
        assert_eq!(bad.frame().await, Some(err(expected)));
        assert_eq!(bad.frame().await, None, "closed after a protocol error");
        assert_eq!(q::<String>(&mut good, &["PING"]).await.unwrap(), "PONG");
    }
    // Within the limits all is well.
    let value = "v".repeat(1000);
    assert_eq!(
        q::<String>(&mut good, &["SET", "k", &value]).await.unwrap(),
        "OK"
    );
    // The storage-side limits: an overlong key.
    let key = "k".repeat(2000);
    let mut cfg = config();
    cfg.max_bulk_bytes = 4096;
    let other = start(cfg);
    let mut c = connect(other.addr()).await;
    let e = q::<String>(&mut c, &["SET", &key, "v"]).await.unwrap_err();
    assert!(e.to_string().contains("key is longer than"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_clients_is_enforced() {
    let mut cfg = config();
    cfg.max_clients = 2;
    let server = start(cfg);
    let mut one = Raw::connect(server.addr()).await;
    let mut two = Raw::connect(server.addr()).await;
    assert_eq!(one.call(&["PING"]).await, Frame::Simple("PONG".into()));
    assert_eq!(two.call(&["PING"]).await, Frame::Simple("PONG".into()));
    let mut three = Raw::connect(server.addr()).await;
    assert_eq!(
        three.frame().await,
        Some(err("ERR max number of clients reached"))
    );
    assert_eq!(three.frame().await, None);
    drop(one);
    // The slot frees once the server notices the close.
    let mut again = None;
    for _ in 0..100 {
        let mut c = Raw::connect(server.addr()).await;
        c.send(b"PING\r\n").await;
        if c.frame().await == Some(Frame::Simple("PONG".into())) {
            again = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "a freed slot is reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_and_acl_users() {
    let mut cfg = config();
    cfg.requirepass = Some("s3cret".into());
    cfg.users = vec![User {
        name: "reader".into(),
        password: "r".into(),
        access: Access::ReadOnly,
    }];
    let server = start(cfg);
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(
        r.call(&["GET", "k"]).await,
        err("NOAUTH Authentication required.")
    );
    assert_eq!(
        r.call(&["PING"]).await,
        err("NOAUTH Authentication required.")
    );
    assert_eq!(
        r.call(&["AUTH", "wrong"]).await,
        err("WRONGPASS invalid username-password pair or user is disabled.")
    );
    // Before AUTH, Redis's small limits apply: 10 arguments at most.
    let mut big = Raw::connect(server.addr()).await;
    big.send(b"*11\r\n").await;
    assert_eq!(
        big.frame().await,
        Some(err("ERR Protocol error: invalid multibulk length"))
    );
    assert_eq!(
        r.call(&["AUTH", "s3cret"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(r.call(&["SET", "k", "v"]).await, Frame::Simple("OK".into()));

    let mut reader = Raw::connect(server.addr()).await;
    assert_eq!(
        reader.call(&["AUTH", "reader", "r"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(reader.call(&["GET", "k"]).await, Frame::bulk("v"));
    assert_eq!(
        reader.call(&["SET", "k", "x"]).await,
        err("NOPERM User reader has no permissions to run the 'set' command")
    );
    for (args, name) in [
        (&["EXPIRE", "k", "10"][..], "expire"),
        (&["FLUSHALL"][..], "flushall"),
        (&["RENAME", "k", "j"][..], "rename"),
        (&["GETEX", "k", "PERSIST"][..], "getex"),
        (&["SETBIT", "k", "1", "1"][..], "setbit"),
    ] {
        assert_eq!(
            reader.call(args).await,
            err(&format!(
                "NOPERM User reader has no permissions to run the '{name}' command"
            ))
        );
    }
    assert_eq!(
        reader.call(&["CONFIG", "SET", "hz", "20"]).await,
        err("NOPERM User reader has no permissions to run the 'config|set' command")
    );
    assert_eq!(reader.call(&["TTL", "k"]).await, Frame::Integer(-1));
    assert!(matches!(reader.call(&["SCAN", "0"]).await, Frame::Array(_)));
    assert_eq!(reader.call(&["DBSIZE"]).await, Frame::Integer(1));
    reader.call(&["MULTI"]).await;
    assert!(reader.call(&["DEL", "k"]).await.is_error());
    assert_eq!(
        reader.call(&["EXEC"]).await,
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    // HELLO with AUTH.
    let mut h = Raw::connect(server.addr()).await;
    assert!(h.call(&["HELLO", "3"]).await.is_error());
    assert!(matches!(
        h.call(&["HELLO", "3", "AUTH", "default", "s3cret"]).await,
        Frame::Map(_)
    ));
    // The redis crate with a password in the URL.
    let client = redis::Client::open(format!("redis://:s3cret@{}/", server.addr())).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    assert_eq!(
        q::<Option<String>>(&mut c, &["GET", "k"]).await.unwrap(),
        Some("v".into())
    );
    let refused = redis::Client::open(format!("redis://:nope@{}/", server.addr()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await;
    assert!(refused.is_err());
}

/// One write holding a pipeline that mixes the in-place fast path (GET,
/// SET, INCR, DECR) with everything it hands over to the general path: state
/// changed by a command (AUTH, MULTI) applies to the very next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pipeline_mixes_fast_and_general_paths() {
    let mut cfg = config();
    cfg.requirepass = Some("pw".into());
    let server = start(cfg);
    let mut r = Raw::connect(server.addr()).await;
    let long_key = "k".repeat(1025);
    let pipeline: Vec<Vec<&str>> = vec![
        vec!["GET", "k"],
        vec!["AUTH", "pw"],
        vec!["SET", "k", "v"],
        vec!["SET", "k", "v2", "GET"],
        vec!["gEt", "k"],
        vec!["INCR", "k"],
        vec!["DECR", "n"],
        vec!["SET", &long_key, "v"],
        vec!["GET", "k", "extra"],
        vec!["MULTI"],
        vec!["SET", "m", "1"],
        vec!["INCR", "m"],
        vec!["EXEC"],
    ];
    let mut wire = Vec::new();
    for args in &pipeline {
        Frame::Array(args.iter().map(|a| Frame::bulk(a.as_bytes())).collect())
            .encode(roost_resp::protocol::Protocol::Resp2, &mut wire);
    }
    r.send(&wire).await;
    let expected = [
        err("NOAUTH Authentication required."),
        Frame::Simple("OK".into()),
        Frame::Simple("OK".into()),
        Frame::bulk("v"),
        Frame::bulk("v2"),
        err("ERR value is not an integer or out of range"),
        Frame::Integer(-1),
        err("ERR key is longer than 1024 bytes"),
        err("ERR wrong number of arguments for 'get' command"),
        Frame::Simple("OK".into()),
        Frame::Simple("QUEUED".into()),
        Frame::Simple("QUEUED".into()),
        Frame::Array(vec![Frame::Simple("OK".into()), Frame::Integer(2)]),
    ];
    for (args, want) in pipeline.iter().zip(expected) {
        assert_eq!(
            r.frame().await,
            Some(want),
            "{:?}",
            &args[..args.len().min(2)]
        );
    }
}

/// `scripts/resp-redis-cli.sh` (redis-cli against `roost resp`),
/// `scripts/resp_transfers.py` (redis-py MULTI/EXEC transfers) and
/// `scripts/resp_functions.py` (redis-py FCALL/FCALL_RO). A missing client
/// fails the test, saying what to install (`scripts/test.sh` installs them).
fn missing(why: &str) -> ! {
    panic!("{why}: run scripts/install-deps.sh (or apt-get install redis-tools python3-redis)");
}

#[test]
fn external_clients() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let have = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let server = start(config());
    let port = server.addr().port().to_string();
    if have("redis-cli", &["--version"]) {
        let out = std::process::Command::new("bash")
            .arg(root.join("scripts/resp-redis-cli.sh"))
            .env("ROOST_RESP_PORT", &port)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "redis-cli script failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        missing("redis-cli is not installed");
    }
    let python = ["python3", "/usr/bin/python3"]
        .into_iter()
        .find(|p| have(p, &["-c", "import redis"]));
    match python {
        Some(python) => {
            for script in ["scripts/resp_transfers.py", "scripts/resp_functions.py"] {
                let out = std::process::Command::new(python)
                    .arg(root.join(script))
                    .arg(&port)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "redis-py {script} failed:\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        None => missing("python3 with redis-py is not installed"),
    }
}

/// A key INCR left holds an integer internally; every command still sees
/// its decimal string, and a string that is not one is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_read_back_as_strings_everywhere() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["INCRBY", "n", "-42"]).await, Frame::Integer(-42));
    assert_eq!(r.call(&["INCR", "n"]).await, Frame::Integer(-41));
    assert_eq!(r.call(&["GET", "n"]).await, Frame::bulk("-41"));
    assert_eq!(
        r.call(&["MGET", "n", "none"]).await,
        Frame::Array(vec![Frame::bulk("-41"), Frame::Null])
    );
    assert_eq!(r.call(&["SET", "n", "7", "GET"]).await, Frame::bulk("-41"));
    assert_eq!(r.call(&["DECRBY", "n", "10"]).await, Frame::Integer(-3));
    assert_eq!(
        r.call(&["RPUSH", "n", "x"]).await,
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(r.call(&["EXISTS", "n"]).await, Frame::Integer(1));
    assert_eq!(
        r.call(&["FCALL_RO", "sum", "1", "n"]).await,
        Frame::Integer(-3)
    );
    assert_eq!(r.call(&["INCR", "m"]).await, Frame::Integer(1));
    assert_eq!(
        r.call(&["FCALL", "transfer", "2", "m", "n", "1"]).await,
        Frame::Array(vec![Frame::Integer(0), Frame::Integer(-2)])
    );
    assert_eq!(r.call(&["GET", "n"]).await, Frame::bulk("-2"));
    assert_eq!(
        r.call(&["INCRBY", "n", "9223372036854775807"]).await,
        Frame::Integer(9223372036854775805)
    );
    assert_eq!(
        r.call(&["INCRBY", "n", "3"]).await,
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(r.call(&["SET", "s", "abc"]).await, Frame::ok());
    assert_eq!(
        r.call(&["INCR", "s"]).await,
        err("ERR value is not an integer or out of range")
    );
}

/// What the Redis 7.0 comparison cannot show: ZRANK's WITHSCORE (Redis
/// 7.2), Roost's own bounds, WATCH over sets (a command that changes
/// nothing leaves the stamp), MULTI/EXEC across set keys, and expired
/// collections reclaimed by the background sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_and_sorted_sets_beyond_redis_7_0() {
    let server = start(roost_resp::Config {
        expire_sweep_interval_ms: 10,
        ..config()
    });
    let mut a = Raw::connect(server.addr()).await;
    let mut b = Raw::connect(server.addr()).await;
    a.call(&["ZADD", "z", "1", "a", "2.5", "b"]).await;
    assert_eq!(
        a.call(&["ZRANK", "z", "b", "WITHSCORE"]).await,
        Frame::Array(vec![Frame::Integer(1), Frame::bulk("2.5")])
    );
    assert_eq!(
        a.call(&["ZREVRANK", "z", "b", "withscore"]).await,
        Frame::Array(vec![Frame::Integer(0), Frame::bulk("2.5")])
    );
    assert_eq!(
        a.call(&["ZRANK", "z", "nomember", "WITHSCORE"]).await,
        Frame::NullArray
    );
    assert_eq!(
        a.call(&["ZRANK", "nokey", "a", "WITHSCORE"]).await,
        Frame::NullArray
    );
    assert_eq!(
        a.call(&["ZRANK", "z", "a", "WITHSCORES"]).await,
        err("ERR syntax error")
    );
    assert_eq!(
        a.call(&["ZRANK", "z", "a", "WITHSCORE", "x"]).await,
        err("ERR wrong number of arguments for 'zrank' command")
    );
    // Members are at most MAX_MEMBER_BYTES (they are part of row keys).
    let longest = "m".repeat(roost_resp::MAX_MEMBER_BYTES);
    let too_long = "m".repeat(roost_resp::MAX_MEMBER_BYTES + 1);
    assert_eq!(a.call(&["SADD", "s", &longest]).await, Frame::Integer(1));
    assert_eq!(
        a.call(&["ZADD", "z", "1", &longest]).await,
        Frame::Integer(1)
    );
    let refused = err("ERR member is longer than 2048 bytes");
    assert_eq!(a.call(&["SADD", "s", &too_long]).await, refused);
    assert_eq!(a.call(&["ZADD", "z", "1", &too_long]).await, refused);
    assert_eq!(a.call(&["SISMEMBER", "s", &too_long]).await, refused);
    // A lex bound longer than any member still selects what Redis would.
    let beyond = format!("({longest}x");
    assert_eq!(
        a.call(&["ZLEXCOUNT", "z", "-", &beyond]).await,
        Frame::Integer(3)
    );
    assert_eq!(
        a.call(&["SRANDMEMBER", "s", "-1000001"]).await,
        err("ERR SRANDMEMBER with a negative count returns at most 1000000 members")
    );
    // WATCH: a SADD that adds nothing changes nothing; one that adds does.
    a.call(&["SADD", "w", "x"]).await;
    a.call(&["WATCH", "w"]).await;
    b.call(&["SADD", "w", "x"]).await;
    b.call(&["ZADD", "z", "1", "a"]).await;
    a.call(&["MULTI"]).await;
    a.call(&["SCARD", "w"]).await;
    assert_eq!(
        a.call(&["EXEC"]).await,
        Frame::Array(vec![Frame::Integer(1)])
    );
    a.call(&["WATCH", "w", "z"]).await;
    b.call(&["ZADD", "z", "2", "a"]).await;
    a.call(&["MULTI"]).await;
    a.call(&["SADD", "w", "y"]).await;
    assert_eq!(a.call(&["EXEC"]).await, Frame::NullArray);
    assert_eq!(a.call(&["SCARD", "w"]).await, Frame::Integer(1));
    // One transaction over several set keys (on several reactors).
    a.call(&["MULTI"]).await;
    a.call(&["SADD", "t1", "a", "b"]).await;
    a.call(&["SADD", "t2", "b", "c"]).await;
    a.call(&["SINTERSTORE", "t3", "t1", "t2"]).await;
    a.call(&["SMOVE", "t1", "t3", "a"]).await;
    a.call(&["SMEMBERS", "t3"]).await;
    match a.call(&["EXEC"]).await {
        Frame::Array(replies) => {
            assert_eq!(replies[..4], [2, 2, 1, 1].map(Frame::Integer));
            let mut members = match &replies[4] {
                Frame::Array(m) => m.clone(),
                other => panic!("{other:?}"),
            };
            members.sort_by_key(|f| format!("{f:?}"));
            assert_eq!(members, vec![Frame::bulk("a"), Frame::bulk("b")]);
        }
        other => panic!("{other:?}"),
    }
    // Large collections that expire: gone at once, reclaimed by the sweep.
    a.call(&["FLUSHALL"]).await;
    let mut sadd = vec!["SADD".to_string(), "big".into()];
    let mut zadd = vec!["ZADD".to_string(), "zbig".into()];
    for i in 0..3000 {
        sadd.push(format!("m{i}"));
        zadd.extend([i.to_string(), format!("m{i}")]);
    }
    let sadd: Vec<&str> = sadd.iter().map(String::as_str).collect();
    let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
    assert_eq!(a.call(&sadd).await, Frame::Integer(3000));
    assert_eq!(a.call(&zadd).await, Frame::Integer(3000));
    assert_eq!(
        a.call(&["ZRANK", "zbig", "m1700"]).await,
        Frame::Integer(1700)
    );
    a.call(&["PEXPIRE", "big", "1"]).await;
    a.call(&["PEXPIRE", "zbig", "1"]).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(a.call(&["EXISTS", "big", "zbig"]).await, Frame::Integer(0));
    assert_eq!(a.call(&["SADD", "big", "fresh"]).await, Frame::Integer(1));
    assert_eq!(
        a.call(&["SMEMBERS", "big"]).await,
        Frame::Array(vec![Frame::bulk("fresh")])
    );
    a.call(&["DEL", "big"]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while a.call(&["DBSIZE"]).await != Frame::Integer(0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the sweep reclaims zbig"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// INFO's `total_error_replies` and errorstats count every error reply by
/// its code, an EXEC's failed commands and a script's `error_reply` too;
/// CONFIG RESETSTAT zeroes them (Redis's "errorstats" tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_replies_are_counted_by_code() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let info = |text: &Frame, field: &str| -> Option<String> {
        let Frame::Bulk(bytes) = text else {
            panic!("INFO answers a bulk: {text:?}");
        };
        let text = String::from_utf8_lossy(bytes).into_owned();
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{field}:")).map(str::to_owned))
    };
    assert_eq!(r.call(&["CONFIG", "RESETSTAT"]).await, Frame::ok());
    assert_eq!(r.call(&["RPUSH", "l", "a"]).await, Frame::Integer(1));
    assert!(matches!(r.call(&["GET", "l"]).await, Frame::Error(e) if e.starts_with("WRONGTYPE")));
    assert!(matches!(r.call(&["NOSUCHCOMMAND"]).await, Frame::Error(_)));
    assert_eq!(r.call(&["MULTI"]).await, Frame::ok());
    r.call(&["INCR", "l"]).await;
    r.call(&["SET", "s", "1"]).await;
    assert!(matches!(r.call(&["EXEC"]).await, Frame::Array(_)));
    let script = "return redis.error_reply('MY_ERR_CODE custom msg')";
    assert_eq!(
        r.call(&["EVAL", script, "0"]).await,
        err("MY_ERR_CODE custom msg")
    );
    let all = r.call(&["INFO", "errorstats"]).await;
    assert_eq!(
        info(&all, "errorstat_WRONGTYPE").as_deref(),
        Some("count=2")
    );
    assert_eq!(info(&all, "errorstat_ERR").as_deref(), Some("count=1"));
    assert_eq!(
        info(&all, "errorstat_MY_ERR_CODE").as_deref(),
        Some("count=1")
    );
    let stats = r.call(&["INFO", "stats"]).await;
    assert_eq!(info(&stats, "total_error_replies").as_deref(), Some("4"));
    assert_eq!(r.call(&["CONFIG", "RESETSTAT"]).await, Frame::ok());
    let stats = r.call(&["INFO"]).await;
    assert_eq!(info(&stats, "total_error_replies").as_deref(), Some("0"));
    assert_eq!(info(&stats, "errorstat_WRONGTYPE"), None);
}

/// A lex range over a sorted set whose scores differ keeps only members in
/// the range (Redis's "ZRANGESTORE BYLEX - empty range": a range past every
/// member is empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lex_ranges_over_mixed_scores_keep_members_in_range() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let bulks = |items: &[&str]| Frame::Array(items.iter().map(|i| Frame::bulk(*i)).collect());
    r.call(&["ZADD", "z1", "1", "a", "2", "b", "3", "c", "4", "d"])
        .await;
    assert_eq!(
        r.call(&["ZRANGESTORE", "z2", "z1", "[f", "[g", "BYLEX"])
            .await,
        Frame::Integer(0)
    );
    assert_eq!(r.call(&["EXISTS", "z2"]).await, Frame::Integer(0));
    assert_eq!(r.call(&["ZRANGEBYLEX", "z1", "[f", "[g"]).await, bulks(&[]));
    assert_eq!(
        r.call(&["ZLEXCOUNT", "z1", "[f", "+"]).await,
        Frame::Integer(0)
    );
    assert_eq!(
        r.call(&["ZRANGE", "z1", "[b", "[c", "BYLEX"]).await,
        bulks(&["b", "c"])
    );
    assert_eq!(
        r.call(&["ZRANGE", "z1", "-", "+", "BYLEX", "LIMIT", "1", "2"])
            .await,
        bulks(&["b", "c"])
    );
}

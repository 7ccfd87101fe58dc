//! Keys, expiry and the keyspace-wide commands against a server on an
//! ephemeral port, with the `redis` crate and a raw client:
//!
//! - one clock reading per transaction: a key that expires while an EXEC
//!   runs is seen the same way by all of its commands, and a key set to
//!   expire 1 ms later inside an EXEC is still there at its end;
//! - SCAN while other clients add and remove keys: every key present for
//!   the whole scan is returned, and no key twice;
//! - the background sweep reclaims expired keys nobody reads (DBSIZE
//!   drops), never more than `expire_sweep_batch` per sweep transaction;
//! - expired keys are gone to every read before they are reclaimed, and a
//!   write reclaims the one it replaces;
//! - FLUSHALL of more keys than one of its transactions deletes, and inside
//!   MULTI; WATCH of a key that expires aborts the EXEC; RENAME and COPY keep
//!   the time to live across reactors; CONFIG SET hz; CLIENT LIST.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::{config, connect, q, start, Raw};
use redis::AsyncCommands;
use roost_resp::protocol::Frame;
use roost_resp::Config;

fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
}

async fn info(c: &mut redis::aio::MultiplexedConnection, section: &str) -> String {
    q::<String>(c, &["INFO", section]).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clock_reading_per_transaction() {
    // Room for an EXEC long enough to straddle a deadline on a fast build.
    let server = start(Config {
        max_multi_commands: 100_000,
        ..config()
    });
    let mut c = connect(server.addr()).await;
    // Deterministic: set to expire 1 ms after the transaction's clock
    // reading, then enough work for several milliseconds to pass: the key
    // is still there for the rest of the transaction.
    let filler: Vec<String> = (0..3000).map(|i| format!("filler:{i}")).collect();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SET")
        .arg("soon")
        .arg("v")
        .arg("PX")
        .arg(1);
    for key in &filler {
        pipe.cmd("SET").arg(key).arg("x");
    }
    pipe.cmd("GET").arg("soon");
    pipe.cmd("PTTL").arg("soon");
    pipe.cmd("EXISTS").arg("soon");
    let started = Instant::now();
    let replies: Vec<redis::Value> = pipe.query_async(&mut c).await.unwrap();
    let took = started.elapsed();
    let n = replies.len();
    assert_eq!(
        redis::from_redis_value::<Option<String>>(replies[n - 3].clone()).unwrap(),
        Some("v".into()),
        "the key set to expire 1 ms later is there at the end of its EXEC ({took:?})"
    );
    assert_eq!(
        redis::from_redis_value::<i64>(replies[n - 2].clone()).unwrap(),
        1
    );
    assert_eq!(
        redis::from_redis_value::<i64>(replies[n - 1].clone()).unwrap(),
        1
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        q::<Option<String>>(&mut c, &["GET", "soon"]).await.unwrap(),
        None
    );

    // A key that expires while an EXEC runs: all of the EXEC's reads agree.
    // The EXEC is sent half its own measured duration before the deadline,
    // so it straddles the deadline whatever the build's speed; rounds repeat
    // (bounded) until a few have straddled.
    // The EXEC is made long enough (at least 30 ms, doubling its work up
    // to a bound) that a straddle does not hinge on a millisecond of timer
    // slack: a fast release build once ran it in under 4 ms.
    let filler_exec = |key: &str, work: usize| {
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("GET").arg(key);
        pipe.cmd("EXISTS").arg(key);
        for i in 0..work {
            pipe.cmd("INCR").arg(format!("counter:{}", i % 3000));
        }
        pipe.cmd("GET").arg(key);
        pipe.cmd("EXISTS").arg(key);
        pipe.cmd("TTL").arg(key);
        pipe
    };
    let mut work = filler.len();
    let mut exec_duration = Duration::ZERO;
    for _ in 0..5 {
        let warm_up = Instant::now();
        let _: Vec<redis::Value> = filler_exec("absent", work)
            .query_async(&mut c)
            .await
            .unwrap();
        exec_duration = warm_up.elapsed();
        if exec_duration >= Duration::from_millis(30) {
            break;
        }
        work *= 2;
    }
    let mut straddled = 0;
    for round in 0..48 {
        if straddled >= 3 {
            break;
        }
        let key = format!("k{round}");
        let ttl_ms = 40.max(2 * exec_duration.as_millis() as u64);
        assert_eq!(
            q::<String>(&mut c, &["SET", &key, "v", "PX", &ttl_ms.to_string()])
                .await
                .unwrap(),
            "OK"
        );
        let set_at = Instant::now();
        tokio::time::sleep(Duration::from_millis(ttl_ms) - exec_duration / 2).await;
        let pipe = filler_exec(&key, work);
        let sent = set_at.elapsed();
        let replies: Vec<redis::Value> = pipe.query_async(&mut c).await.unwrap();
        let done = set_at.elapsed();
        exec_duration = done - sent;
        let n = replies.len();
        let get_first: Option<String> = redis::from_redis_value(replies[0].clone()).unwrap();
        let exists_first: i64 = redis::from_redis_value(replies[1].clone()).unwrap();
        let get_last: Option<String> = redis::from_redis_value(replies[n - 3].clone()).unwrap();
        let exists_last: i64 = redis::from_redis_value(replies[n - 2].clone()).unwrap();
        let ttl: i64 = redis::from_redis_value(replies[n - 1].clone()).unwrap();
        assert_eq!(get_first, get_last, "round {round}");
        assert_eq!(exists_first, exists_last, "round {round}");
        assert_eq!(get_first.is_some(), exists_first == 1);
        assert_eq!(ttl, if exists_first == 1 { 0 } else { -2 });
        if sent < Duration::from_millis(ttl_ms) && done > Duration::from_millis(ttl_ms + 2) {
            straddled += 1;
        }
    }
    assert!(
        straddled > 0,
        "no EXEC ran across its key's deadline: the check proved nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_returns_every_key_present_throughout() {
    let server = start(config());
    let addr = server.addr();
    let mut c = connect(addr).await;
    const STABLE: usize = 1500;
    let mut pipe = redis::pipe();
    for i in 0..STABLE {
        pipe.cmd("SET").arg(format!("stable:{i}")).arg(i).ignore();
    }
    pipe.query_async::<()>(&mut c).await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Writers add and remove keys everywhere in the keyspace meanwhile
    // (some with a time to live of a few milliseconds).
    let mut writers = Vec::new();
    for w in 0..3 {
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            let mut i = 0u64;
            let mut ops = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut pipe = redis::pipe();
                for _ in 0..20 {
                    pipe.cmd("SET")
                        .arg(format!("churn:{w}:{i}"))
                        .arg("x")
                        .ignore();
                    if i % 3 == 0 {
                        pipe.cmd("SET")
                            .arg(format!("brief:{w}:{i}"))
                            .arg("x")
                            .arg("PX")
                            .arg(3)
                            .ignore();
                    }
                    if i >= 40 {
                        pipe.cmd("DEL")
                            .arg(format!("churn:{w}:{}", i - 40))
                            .ignore();
                    }
                    i += 1;
                }
                pipe.query_async::<()>(&mut c).await.unwrap();
                ops += 1;
                // Leave the (two-core) machine to the scanner part of the time.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            ops
        }));
    }
    for count in [1usize, 17, 250] {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut cursor = 0u64;
        let mut calls = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(count)
                .query_async(&mut c)
                .await
                .unwrap();
            for key in keys {
                *seen.entry(key).or_default() += 1;
            }
            calls += 1;
            cursor = next;
            if cursor == 0 {
                break;
            }
            assert!(calls < 1_000_000, "SCAN COUNT {count} does not end");
        }
        let missing: Vec<usize> = (0..STABLE)
            .filter(|i| !seen.contains_key(&format!("stable:{i}")))
            .collect();
        assert!(
            missing.is_empty(),
            "SCAN COUNT {count} missed {} keys present throughout, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        let twice: Vec<&String> = seen
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, _)| k)
            .collect();
        assert!(
            twice.is_empty(),
            "SCAN COUNT {count} returned keys twice: {twice:?}"
        );
        assert!(
            seen.keys().any(|k| k.starts_with("churn:")),
            "the writers' keys were scanned too"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for writer in writers {
        assert!(writer.await.unwrap() > 0, "a writer ran during the scans");
    }
    // The crate's own iterator, with MATCH.
    let mut iter: redis::AsyncIter<String> = c.scan_match("stable:1*").await.unwrap();
    let mut matched = HashSet::new();
    while let Some(key) = iter.next_item().await {
        matched.insert(key.unwrap());
    }
    let expected = (0..STABLE)
        .filter(|i| i.to_string().starts_with('1'))
        .count();
    assert_eq!(matched.len(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_keys_are_reclaimed_in_bounded_sweeps() {
    const BATCH: usize = 50;
    let server = start(Config {
        expire_sweep_interval_ms: 20,
        expire_sweep_batch: BATCH,
        ..config()
    });
    let mut c = connect(server.addr()).await;
    const VOLATILE: usize = 5000;
    const LASTING: usize = 100;
    for chunk in 0..VOLATILE / 500 {
        let mut pipe = redis::pipe();
        for i in chunk * 500..(chunk + 1) * 500 {
            pipe.cmd("SET")
                .arg(format!("v:{i}"))
                .arg("x".repeat(100))
                .arg("PX")
                .arg(2000)
                .ignore();
        }
        pipe.query_async::<()>(&mut c).await.unwrap();
    }
    let mut pipe = redis::pipe();
    for i in 0..LASTING {
        pipe.cmd("SET").arg(format!("p:{i}")).arg("x").ignore();
    }
    pipe.query_async::<()>(&mut c).await.unwrap();
    let keyspace = info(&mut c, "keyspace").await;
    assert!(
        keyspace.contains(&format!(
            "db0:keys={},expires={VOLATILE},avg_ttl=0",
            VOLATILE + LASTING
        )),
        "{keyspace}"
    );
    let sweeps_before = info_field(&info(&mut c, "stats").await, "roost_expire_sweeps").unwrap();
    // Nobody reads the volatile keys: only the sweep can reclaim them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let size: usize = q(&mut c, &["DBSIZE"]).await.unwrap();
        if size == LASTING {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "DBSIZE still {size} after 30 s: the sweep did not reclaim the expired keys"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = info(&mut c, "stats").await;
    assert_eq!(
        info_field(&stats, "expired_keys"),
        Some(VOLATILE as u64),
        "{stats}"
    );
    let max = info_field(&stats, "roost_expire_sweep_max_keys").unwrap();
    assert!(
        max <= BATCH as u64 && max > 0,
        "a sweep deleted {max} keys, the batch is {BATCH}"
    );
    let sweeps = info_field(&stats, "roost_expire_sweeps").unwrap() - sweeps_before;
    assert!(
        sweeps >= (VOLATILE / BATCH) as u64,
        "{VOLATILE} keys in batches of {BATCH} took only {sweeps} sweeps"
    );
    let keyspace = info(&mut c, "keyspace").await;
    assert!(
        keyspace.contains(&format!("db0:keys={LASTING},expires=0,")),
        "{keyspace}"
    );
    let keys: Vec<String> = q(&mut c, &["KEYS", "*"]).await.unwrap();
    assert_eq!(keys.len(), LASTING);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_keys_vanish_for_reads_before_they_are_reclaimed() {
    // No sweep during the test: only reads and writes see the keys.
    let server = start(Config {
        expire_sweep_interval_ms: 60_000,
        ..config()
    });
    let mut c = connect(server.addr()).await;
    for i in 0..10 {
        let _: () = q(&mut c, &["SET", &format!("e{i}"), "v", "PX", "30"])
            .await
            .unwrap();
    }
    let _: () = q(&mut c, &["RPUSH", "elist", "a"]).await.unwrap();
    let _: i64 = q(&mut c, &["PEXPIRE", "elist", "30"]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    // Counted until reclaimed (as Redis's DBSIZE), invisible to every read.
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]).await.unwrap(), 11);
    assert_eq!(
        q::<Option<String>>(&mut c, &["GET", "e0"]).await.unwrap(),
        None
    );
    assert_eq!(
        q::<i64>(&mut c, &["EXISTS", "e0", "e1", "elist"])
            .await
            .unwrap(),
        0
    );
    assert_eq!(q::<i64>(&mut c, &["TTL", "e0"]).await.unwrap(), -2);
    assert_eq!(
        q::<String>(&mut c, &["TYPE", "elist"]).await.unwrap(),
        "none"
    );
    assert_eq!(q::<i64>(&mut c, &["LLEN", "elist"]).await.unwrap(), 0);
    assert!(q::<Vec<String>>(&mut c, &["KEYS", "*"])
        .await
        .unwrap()
        .is_empty());
    let (cursor, keys): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(1000)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((cursor, keys.len()), (0, 0));
    assert_eq!(
        q::<Option<String>>(&mut c, &["RANDOMKEY"]).await.unwrap(),
        None
    );
    assert_eq!(q::<i64>(&mut c, &["PERSIST", "e0"]).await.unwrap(), 0);
    assert_eq!(q::<i64>(&mut c, &["EXPIRE", "e0", "100"]).await.unwrap(), 0);
    // An expired key is absent to writes: SET NX succeeds and reclaims it.
    assert_eq!(
        q::<Option<String>>(&mut c, &["SET", "e0", "new", "NX"])
            .await
            .unwrap(),
        Some("OK".into())
    );
    assert_eq!(q::<i64>(&mut c, &["TTL", "e0"]).await.unwrap(), -1);
    assert_eq!(q::<i64>(&mut c, &["DEL", "e1"]).await.unwrap(), 0);
    assert_eq!(q::<i64>(&mut c, &["INCR", "e2"]).await.unwrap(), 1);
    assert_eq!(q::<i64>(&mut c, &["RPUSH", "elist", "b"]).await.unwrap(), 1);
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]).await.unwrap(), 10);
    let stats = info(&mut c, "stats").await;
    assert_eq!(info_field(&stats, "expired_keys"), Some(4), "{stats}");
    assert_eq!(
        q::<Vec<String>>(&mut c, &["KEYS", "e*"])
            .await
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_large_and_inside_multi() {
    let server = start(config());
    let mut c = connect(server.addr()).await;
    for chunk in 0..10 {
        let mut pipe = redis::pipe();
        for i in chunk * 500..(chunk + 1) * 500 {
            pipe.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
            if i % 2 == 0 {
                pipe.cmd("EXPIRE").arg(format!("k{i}")).arg(1000).ignore();
            }
        }
        pipe.query_async::<()>(&mut c).await.unwrap();
    }
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]).await.unwrap(), 5000);
    assert_eq!(q::<String>(&mut c, &["FLUSHALL"]).await.unwrap(), "OK");
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]).await.unwrap(), 0);
    assert!(q::<Vec<String>>(&mut c, &["KEYS", "*"])
        .await
        .unwrap()
        .is_empty());
    let keyspace = info(&mut c, "keyspace").await;
    assert!(!keyspace.contains("db0:"), "{keyspace}");
    // Inside MULTI it is one command of the transaction.
    let (a, b, c2, keys): (String, String, String, Vec<String>) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("a")
        .arg(1)
        .cmd("FLUSHDB")
        .cmd("SET")
        .arg("b")
        .arg(2)
        .cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((a.as_str(), b.as_str(), c2.as_str()), ("OK", "OK", "OK"));
    assert_eq!(keys, vec!["b".to_string()]);
    // Pipelined: FLUSHALL ends the batch; later commands see it done.
    let (n, ok, after): (i64, String, i64) = redis::pipe()
        .cmd("DBSIZE")
        .cmd("FLUSHALL")
        .arg("ASYNC")
        .cmd("DBSIZE")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((n, ok.as_str(), after), (1, "OK", 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_rename_copy_and_server_commands() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    // A watched key that expires before EXEC aborts it (Redis 7).
    r.call(&["SET", "w", "v", "PX", "30"]).await;
    assert_eq!(r.call(&["WATCH", "w"]).await, Frame::Simple("OK".into()));
    tokio::time::sleep(Duration::from_millis(60)).await;
    r.call(&["MULTI"]).await;
    r.call(&["SET", "x", "1"]).await;
    assert_eq!(r.call(&["EXEC"]).await, Frame::NullArray);
    // RENAME and COPY carry the deadline, whatever reactors the keys are on.
    let mut c = connect(server.addr()).await;
    let _: () = q(&mut c, &["SET", "src", "v", "EX", "1000"]).await.unwrap();
    for i in 0..20 {
        let to = format!("dst{i}");
        let _: () = q(&mut c, &["COPY", "src", &format!("copy{i}")])
            .await
            .unwrap();
        let _: () = q(&mut c, &["RENAME", "src", &to]).await.unwrap();
        let _: () = q(&mut c, &["RENAME", &to, "src"]).await.unwrap();
        let ttl: i64 = q(&mut c, &["TTL", &format!("copy{i}")]).await.unwrap();
        assert!((998..=1000).contains(&ttl), "{ttl}");
    }
    assert!((998..=1000).contains(&q::<i64>(&mut c, &["TTL", "src"]).await.unwrap()));
    assert_eq!(
        q::<i64>(&mut c, &["EXISTS", "dst0", "dst19"])
            .await
            .unwrap(),
        0
    );
    // DBSIZE inside MULTI counts the transaction's own writes.
    let (before, _, _, after): (i64, String, i64, i64) = redis::pipe()
        .atomic()
        .cmd("DBSIZE")
        .cmd("SET")
        .arg("fresh")
        .arg(1)
        .cmd("DEL")
        .arg("src")
        .cmd("DBSIZE")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(after, before);
    // CONFIG SET hz moves the sweep; GET shows it.
    let _: () = q(&mut c, &["CONFIG", "SET", "hz", "50"]).await.unwrap();
    let hz: HashMap<String, String> = q(&mut c, &["CONFIG", "GET", "hz"]).await.unwrap();
    assert_eq!(hz["hz"], "50");
    let server_info = info(&mut c, "server").await;
    assert_eq!(info_field(&server_info, "hz"), Some(50), "{server_info}");
    // CLIENT LIST shows each connection with its name and library.
    let mut other = Raw::connect(server.addr()).await;
    other.call(&["CLIENT", "SETNAME", "worker-7"]).await;
    assert_eq!(
        other
            .call(&["CLIENT", "SETINFO", "LIB-NAME", "roost-test"])
            .await,
        Frame::Simple("OK".into())
    );
    other.call(&["MULTI"]).await;
    other.call(&["PING"]).await;
    let list = match r.call(&["CLIENT", "LIST"]).await {
        Frame::Bulk(text) => String::from_utf8(text).unwrap(),
        other => panic!("CLIENT LIST: {other:?}"),
    };
    let line = list
        .lines()
        .find(|l| l.contains("name=worker-7"))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(line.contains(" lib-name=roost-test"), "{line}");
    assert!(
        line.contains(" flags=x ") && line.contains(" multi=1 "),
        "{line}"
    );
    assert!(
        line.contains(" addr=127.0.0.1:") && line.contains(" cmd=ping "),
        "{line}"
    );
    assert!(list.lines().count() >= 3, "{list}");
    let id = match other.call(&["EXEC"]).await {
        Frame::Array(_) => match other.call(&["CLIENT", "ID"]).await {
            Frame::Integer(id) => id,
            f => panic!("{f:?}"),
        },
        f => panic!("{f:?}"),
    };
    match r
        .call(&["CLIENT", "LIST", "ID", &id.to_string(), "999999"])
        .await
    {
        Frame::Bulk(text) => {
            let text = String::from_utf8(text).unwrap();
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(text.starts_with(&format!("id={id} ")), "{text}");
        }
        f => panic!("{f:?}"),
    }
    drop(other);
    match r.call(&["TIME"]).await {
        Frame::Array(parts) => assert_eq!(parts.len(), 2),
        f => panic!("TIME: {f:?}"),
    }
}

//! Lua scripting over the wire: EVAL/EVALSHA/EVAL_RO, SCRIPT, the type
//! conversions of Redis, redis.call/pcall, Redis 7's error texts, the
//! sandbox, atomicity under concurrent clients, a raising script applying
//! nothing (also inside MULTI/EXEC), the time limit and SCRIPT KILL, and Lua
//! libraries (FUNCTION LOAD, FCALL, FCALL_RO) beside the Rust functions.

mod common;

use std::time::{Duration, Instant};

use common::{config, err, start, Raw};
use roost_resp::protocol::Frame;
use roost_resp::{Access, Config, User};

fn bulk(text: &str) -> Frame {
    Frame::bulk(text)
}

fn ints(values: &[i64]) -> Frame {
    Frame::Array(values.iter().map(|&v| Frame::Integer(v)).collect())
}

/// Every string inside a frame, in order.
fn words(frame: &Frame) -> Vec<String> {
    match frame {
        Frame::Bulk(b) => vec![String::from_utf8_lossy(b).into_owned()],
        Frame::Simple(s) => vec![s.clone()],
        Frame::Array(items) | Frame::Set(items) => items.iter().flat_map(words).collect(),
        Frame::Map(pairs) => pairs
            .iter()
            .flat_map(|(k, v)| words(k).into_iter().chain(words(v)))
            .collect(),
        _ => Vec::new(),
    }
}

fn error_text(frame: &Frame) -> &str {
    match frame {
        Frame::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

async fn eval(r: &mut Raw, script: &str, keys: &[&str], args: &[&str]) -> Frame {
    let numkeys = keys.len().to_string();
    let mut all = vec!["EVAL", script, numkeys.as_str()];
    all.extend_from_slice(keys);
    all.extend_from_slice(args);
    r.call(&all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_values_become_redis_replies() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let cases: Vec<(&str, Frame)> = vec![
        ("return 1", Frame::Integer(1)),
        ("return 3.99", Frame::Integer(3)),
        ("return -3.99", Frame::Integer(-3)),
        ("return 'x'", bulk("x")),
        ("return true", Frame::Integer(1)),
        ("return false", Frame::Null),
        ("return nil", Frame::Null),
        (
            "return {1, 'two', {3, 'four'}, nil, 5}",
            Frame::Array(vec![
                Frame::Integer(1),
                bulk("two"),
                Frame::Array(vec![Frame::Integer(3), bulk("four")]),
            ]),
        ),
        ("return {ok = 'FINE'}", Frame::Simple("FINE".into())),
        ("return {err = 'MYERR it broke'}", err("MYERR it broke")),
        (
            "return redis.status_reply('DONE')",
            Frame::Simple("DONE".into()),
        ),
        ("return redis.error_reply('MY bad')", err("MY bad")),
        (
            // Redis 7: the first word is the code (`ERR` only for one word).
            "return redis.error_reply('lower case')",
            err("lower case"),
        ),
        (
            "return redis.sha1hex('abc')",
            bulk("a9993e364706816aba3e25717850c26c9cd0d89d"),
        ),
        (
            "return cjson.encode({a = {1, 2, 'x'}})",
            bulk(r#"{"a":[1,2,"x"]}"#),
        ),
        ("return cjson.decode('[1, 2, \"x\"]')[3]", bulk("x")),
        (
            "return cjson.encode(cjson.decode('{\"k\":null}'))",
            bulk(r#"{"k":null}"#),
        ),
        ("return {}", Frame::Array(vec![])),
    ];
    for (script, expected) in cases {
        assert_eq!(eval(&mut r, script, &[], &[]).await, expected, "{script}");
    }
    assert_eq!(
        eval(
            &mut r,
            "return {KEYS[1], ARGV[1], #KEYS, #ARGV}",
            &["k1"],
            &["a1", "a2"]
        )
        .await,
        Frame::Array(vec![
            bulk("k1"),
            bulk("a1"),
            Frame::Integer(1),
            Frame::Integer(2)
        ])
    );
    // A 1 MiB argument goes through whole.
    let big = "x".repeat(1 << 20);
    assert_eq!(
        eval(&mut r, "return #ARGV[1]", &[], &[&big]).await,
        Frame::Integer(1 << 20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_replies_become_lua_values() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let k = &["k", "list", "s"];
    let cases: Vec<(&str, Frame)> = vec![
        // nil bulk -> false
        ("return type(redis.call('get', KEYS[1]))", bulk("boolean")),
        ("return redis.call('get', KEYS[1]) == false", Frame::Integer(1)),
        // status -> {ok=...}
        ("return redis.call('set', KEYS[1], '41').ok", bulk("OK")),
        ("return redis.call('set', KEYS[1], '41')", Frame::Simple("OK".into())),
        // integer -> number
        ("return type(redis.call('incr', KEYS[1]))", bulk("number")),
        ("return redis.call('get', KEYS[1])", bulk("42")),
        // array -> table
        (
            "redis.call('rpush', KEYS[2], 'a', 'b', 'c') return redis.call('lrange', KEYS[2], 0, -1)",
            Frame::Array(vec![bulk("a"), bulk("b"), bulk("c")]),
        ),
        ("return #redis.call('lrange', KEYS[2], 0, -1)", Frame::Integer(3)),
        // numbers as arguments print as Lua prints them
        ("redis.call('set', KEYS[1], 7) return redis.call('incrby', KEYS[1], 3)", Frame::Integer(10)),
        // error -> {err=...} through redis.pcall
        (
            "redis.call('set', KEYS[3], 'abc') return redis.pcall('incr', KEYS[3]).err",
            bulk("ERR value is not an integer or out of range"),
        ),
        // pcall catches redis.call's raise
        (
            "local ok, e = pcall(redis.call, 'incr', KEYS[3]) return {ok and 1 or 0, e.err}",
            Frame::Array(vec![Frame::Integer(0), bulk("ERR value is not an integer or out of range")]),
        ),
        (
            "local ok, e = pcall(function() return redis.call('get', KEYS[1]) end) return {tostring(ok), e}",
            Frame::Array(vec![bulk("true"), bulk("10")]),
        ),
        // a returned error reply is a reply, not a raise
        ("return redis.pcall('incr', KEYS[3])", err("ERR value is not an integer or out of range")),
    ];
    for (script, expected) in cases {
        assert_eq!(eval(&mut r, script, k, &[]).await, expected, "{script}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_follow_redis_and_the_sandbox_holds() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(
        r.call(&["EVAL", "return 1", "2", "a"]).await,
        err("ERR Number of keys can't be greater than number of args")
    );
    assert_eq!(
        r.call(&["EVAL", "return 1", "-1"]).await,
        err("ERR Number of keys can't be negative")
    );
    assert_eq!(
        r.call(&["EVAL", "return 1", "x"]).await,
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        r.call(&["EVAL", "return 1"]).await,
        err("ERR wrong number of arguments for 'eval' command")
    );
    let starts = |frame: &Frame, prefix: &str| {
        let text = error_text(frame).to_owned();
        assert!(
            text.starts_with(prefix),
            "{text:?} should start with {prefix:?}"
        );
        text
    };
    starts(
        &eval(&mut r, "return (", &[], &[]).await,
        "ERR Error compiling script",
    );
    starts(
        &eval(&mut r, "return nil + 1", &[], &[]).await,
        "ERR Error running script",
    );
    let text = starts(
        &eval(&mut r, "x = 1", &[], &[]).await,
        "ERR Error running script",
    );
    assert!(
        text.contains("Attempt to modify a readonly table"),
        "{text}"
    );
    // Redis's read-only globals: no global replaced, no field of `redis`
    // or `cjson`, no metatable swapped or edited, no rawset around them.
    for script in [
        "redis = function() return 1 end",
        "_G = {}",
        "setmetatable(_G, {})",
        "local g = getmetatable(_G) g.__index = {}",
        "redis.call = function() return 1 end",
        "cjson.encode = function() return 1 end",
        "rawset(_G, 'x', 1)",
        "rawset(redis, 'call', 1)",
        "setmetatable(cjson, {})",
        "getmetatable(redis).__newindex = nil",
    ] {
        let text = starts(
            &eval(&mut r, script, &[], &[]).await,
            "ERR Error running script",
        );
        assert!(
            text.contains("Attempt to modify a readonly table"),
            "{script}: {text}"
        );
    }
    // What scripts may still do: their own tables and metatables, and the
    // protected tables' contents.
    assert_eq!(
        eval(
            &mut r,
            "local t = setmetatable({}, {__index = function() return 7 end}) rawset(t, 'a', 1) \
             return {t.a, t.b, type(redis.call), cjson.encode({1})}",
            &[],
            &[]
        )
        .await,
        Frame::Array(vec![
            Frame::Integer(1),
            Frame::Integer(7),
            Frame::bulk("function"),
            Frame::bulk("[1]")
        ])
    );
    for (script, name) in [
        ("return undefined_thing", "undefined_thing"),
        ("return os.time()", "os"),
        ("return io.open('/etc/passwd')", "io"),
        ("return dofile('/etc/passwd')", "dofile"),
        ("return require('os')", "require"),
        ("return package.loaded", "package"),
        ("return coroutine.create(print)", "coroutine"),
    ] {
        let text = starts(
            &eval(&mut r, script, &[], &[]).await,
            "ERR Error running script",
        );
        assert!(
            text.contains(&format!(
                "Script attempted to access nonexistent global variable '{name}'"
            )),
            "{script}: {text}"
        );
    }
    assert_eq!(
        eval(&mut r, "return redis.call('nosuch', KEYS[1])", &["k"], &[]).await,
        err("ERR Unknown Redis command called from script")
    );
    assert_eq!(
        eval(&mut r, "return redis.call('get')", &[], &[]).await,
        err("ERR Wrong number of args calling Redis command from script")
    );
    assert_eq!(
        eval(&mut r, "return redis.call('multi')", &[], &[]).await,
        err("ERR This Redis command is not allowed from script")
    );
    assert_eq!(
        eval(&mut r, "return redis.call('eval', 'return 1', 0)", &[], &[]).await,
        err("ERR This Redis command is not allowed from script")
    );
    assert_eq!(
        eval(&mut r, "return redis.call()", &[], &[]).await,
        err("ERR Please specify at least one argument for this redis lib call")
    );
    assert_eq!(
        eval(&mut r, "return redis.call('set', KEYS[1], {})", &["k"], &[]).await,
        err("ERR Lua redis lib command arguments must be strings or integers")
    );
    // Undeclared keys and commands on no key are served, in the script's
    // one transaction (Redis outside cluster mode).
    assert_eq!(r.call(&["SET", "undeclared", "seen"]).await, Frame::ok());
    assert_eq!(
        eval(
            &mut r,
            "redis.call('set', 'undeclared2', 'x'); return redis.call('get', 'undeclared')",
            &["k"],
            &[],
        )
        .await,
        Frame::bulk("seen")
    );
    assert_eq!(r.call(&["GET", "undeclared2"]).await, Frame::bulk("x"));
    let Frame::Integer(keys) = eval(&mut r, "return redis.call('dbsize')", &[], &[]).await else {
        panic!("DBSIZE from a script");
    };
    assert!(keys >= 2, "{keys}");
    assert_eq!(
        r.call(&[
            "EVAL_RO",
            "return redis.call('set', KEYS[1], 'v')",
            "1",
            "k"
        ])
        .await,
        err("ERR Write commands are not allowed from read-only scripts.")
    );
    assert_eq!(
        r.call(&[
            "EVAL",
            "#!lua flags=no-writes\nreturn redis.call('set', KEYS[1], 'v')",
            "1",
            "k"
        ])
        .await,
        err("ERR Write commands are not allowed from read-only scripts.")
    );
    assert_eq!(
        r.call(&["EVAL_RO", "return redis.call('get', KEYS[1])", "1", "k"])
            .await,
        Frame::Null
    );
    // Out of memory, a cyclic reply, a deep JSON: errors, not a crash.
    starts(
        &eval(
            &mut r,
            "return string.rep('x', 1024 * 1024 * 1024)",
            &[],
            &[],
        )
        .await,
        "ERR",
    );
    starts(
        &eval(&mut r, "local t = {} t[1] = t return t", &[], &[]).await,
        "ERR",
    );
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    starts(
        &eval(&mut r, "return cjson.decode(ARGV[1])", &[], &[&deep]).await,
        "ERR",
    );
    starts(
        &eval(
            &mut r,
            "local t = {} t.t = t return cjson.encode(t)",
            &[],
            &[],
        )
        .await,
        "ERR",
    );
    assert_eq!(r.call(&["PING"]).await, Frame::Simple("PONG".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_cache_evalsha_and_flush() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
    assert_eq!(
        r.call(&["EVALSHA", sha, "0"]).await,
        err("NOSCRIPT No matching script. Please use EVAL.")
    );
    assert_eq!(r.call(&["SCRIPT", "LOAD", "return 1"]).await, bulk(sha));
    assert_eq!(r.call(&["EVALSHA", sha, "0"]).await, Frame::Integer(1));
    // The name is case-insensitive, as Redis's.
    assert_eq!(
        r.call(&["EVALSHA", &sha.to_ascii_uppercase(), "0"]).await,
        Frame::Integer(1)
    );
    assert_eq!(r.call(&["EVALSHA_RO", sha, "0"]).await, Frame::Integer(1));
    assert_eq!(
        r.call(&["SCRIPT", "EXISTS", sha, "ffff"]).await,
        ints(&[1, 0])
    );
    // EVAL caches its script too.
    let body = "return ARGV[1]";
    let _ = r.call(&["EVAL", body, "0", "x"]).await;
    let sha2 = match r.call(&["SCRIPT", "LOAD", body]).await {
        Frame::Bulk(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(r.call(&["EVALSHA", &sha2, "0", "y"]).await, bulk("y"));
    assert!(error_text(&r.call(&["SCRIPT", "LOAD", "return ("]).await)
        .starts_with("ERR Error compiling script"));
    assert_eq!(r.call(&["SCRIPT", "FLUSH"]).await, Frame::ok());
    assert_eq!(
        r.call(&["SCRIPT", "EXISTS", sha, &sha2]).await,
        ints(&[0, 0])
    );
    assert_eq!(
        r.call(&["EVALSHA", sha, "0"]).await,
        err("NOSCRIPT No matching script. Please use EVAL.")
    );
    assert_eq!(
        r.call(&["SCRIPT", "KILL"]).await,
        err("NOTBUSY No scripts in execution right now.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_raises_applies_nothing() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["MSET", "a", "old", "n", "abc"]).await, Frame::ok());
    let script = "redis.call('set', KEYS[1], 'new') redis.call('del', KEYS[3]) return redis.call('incr', KEYS[2])";
    assert_eq!(
        eval(&mut r, script, &["a", "n", "c"], &[]).await,
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.call(&["GET", "a"]).await, bulk("old"));
    // A runtime error after a write: nothing either.
    let text = eval(
        &mut r,
        "redis.call('set', KEYS[1], 'new') return nil + 1",
        &["a"],
        &[],
    )
    .await;
    assert!(error_text(&text).starts_with("ERR Error running script"));
    assert_eq!(r.call(&["GET", "a"]).await, bulk("old"));
    // Inside MULTI/EXEC the other commands still apply, the script not.
    assert_eq!(r.call(&["MULTI"]).await, Frame::ok());
    assert_eq!(
        r.call(&["SET", "x", "1"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        eval(&mut r, script, &["a", "n", "c"], &[]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        r.call(&["SET", "y", "2"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        r.call(&["EXEC"]).await,
        Frame::Array(vec![
            Frame::ok(),
            err("ERR value is not an integer or out of range"),
            Frame::ok()
        ])
    );
    assert_eq!(
        r.call(&["MGET", "a", "x", "y"]).await,
        Frame::Array(vec![bulk("old"), bulk("1"), bulk("2")])
    );
    // A script that returns an error reply (it does not raise) applies its writes.
    assert_eq!(
        eval(
            &mut r,
            "redis.call('set', KEYS[1], 'kept') return redis.error_reply('NOPE')",
            &["a"],
            &[]
        )
        .await,
        err("ERR NOPE")
    );
    assert_eq!(r.call(&["GET", "a"]).await, bulk("kept"));
    // A pipeline: the failing script's neighbours apply.
    let mut wire = Vec::new();
    for args in [
        vec!["SET", "p", "1"],
        vec!["EVAL", script, "3", "a", "n", "c"],
        vec!["INCR", "p"],
    ] {
        Frame::Array(args.iter().map(|a| bulk(a)).collect())
            .encode(roost_resp::protocol::Protocol::Resp2, &mut wire);
    }
    r.send(&wire).await;
    assert_eq!(r.frame().await.unwrap(), Frame::ok());
    assert_eq!(
        r.frame().await.unwrap(),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(r.frame().await.unwrap(), Frame::Integer(2));
    assert_eq!(r.call(&["GET", "a"]).await, bulk("kept"));
}

fn limited(ms: u64) -> Config {
    Config {
        lua_time_limit_ms: ms,
        ..config()
    }
}

/// Polls PING on `r` until the server answers BUSY (a script is past its
/// time limit); the BUSY text.
async fn wait_busy(r: &mut Raw) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match r.call(&["PING"]).await {
            Frame::Error(e) => return e,
            other => assert_eq!(other, Frame::Simple("PONG".into())),
        }
        assert!(Instant::now() < deadline, "the script never became busy");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_past_its_time_limit_makes_others_busy_until_killed_and_applies_nothing() {
    let server = start(limited(100));
    let addr = server.addr();
    let mut r = Raw::connect(addr).await;
    assert_eq!(r.call(&["SET", "a", "old"]).await, Frame::ok());
    for script in [
        "while true do end",
        // It wrote first: killed all the same, nothing applies.
        "redis.call('set', KEYS[1], 'new') while true do end",
        // pcall cannot catch its way past SCRIPT KILL.
        "while true do pcall(function() while true do end end) end",
        "local n = 0 while true do n = n + #redis.call('get', KEYS[1]) end",
        "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end",
    ] {
        let body = script.to_owned();
        let runner = tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            c.call(&["EVAL", &body, "1", "a"]).await
        });
        let mut other = Raw::connect(addr).await;
        assert_eq!(wait_busy(&mut other).await, BUSY_EVAL, "{script}");
        // Data commands are refused too; FUNCTION KILL is for functions.
        assert_eq!(other.call(&["GET", "a"]).await, err(BUSY_EVAL));
        assert_eq!(other.call(&["FUNCTION", "KILL"]).await, err(BUSY_EVAL));
        assert_eq!(other.call(&["SCRIPT", "KILL"]).await, Frame::ok());
        let reply = tokio::time::timeout(Duration::from_secs(20), runner)
            .await
            .expect("the killed script answers")
            .unwrap();
        let text = error_text(&reply);
        assert!(text.contains("killed by user"), "{script}: {text}");
        assert_eq!(other.call(&["PING"]).await, Frame::Simple("PONG".into()));
    }
    assert_eq!(r.call(&["GET", "a"]).await, bulk("old"));
    assert_eq!(
        r.call(&["SCRIPT", "KILL"]).await,
        err("NOTBUSY No scripts in execution right now.")
    );
    // A script past the limit that ends by itself answers its caller.
    assert_eq!(
        eval(
            &mut r,
            "for i=1,300000 do redis.call('ping') end return 'done'",
            &[],
            &[]
        )
        .await,
        bulk("done")
    );
    // CONFIG reads and changes the limit under Redis 7's names.
    assert_eq!(
        r.call(&["CONFIG", "GET", "busy-reply-threshold"]).await,
        Frame::Array(vec![bulk("busy-reply-threshold"), bulk("100")])
    );
    assert_eq!(
        r.call(&["CONFIG", "SET", "lua-time-limit", "200"]).await,
        Frame::ok()
    );
    // FUNCTION LOAD's code has Redis's own limit.
    let reply = r
        .call(&["FUNCTION", "LOAD", "#!lua name=loop\nwhile true do end"])
        .await;
    assert!(
        error_text(&reply).contains("FUNCTION LOAD timeout"),
        "{reply:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_transactions_and_function_kill_follow_redis() {
    let server = start(limited(50));
    let addr = server.addr();
    let mut r = Raw::connect(addr).await;
    assert_eq!(r.call(&["SET", "xx", "1"]).await, Frame::ok());
    // A MULTI begun before: its EXEC during the busy script is discarded.
    let mut m = Raw::connect(addr).await;
    assert_eq!(m.call(&["MULTI"]).await, Frame::ok());
    assert_eq!(
        m.call(&["INCR", "xx"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        r.call(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=spin\nredis.register_function('spin', function() local a = 1 while true do a = a + 1 end end)"
        ])
        .await,
        bulk("spin")
    );
    let runner = tokio::spawn(async move {
        let mut c = Raw::connect(addr).await;
        c.call(&["FCALL", "spin", "0"]).await
    });
    assert_eq!(wait_busy(&mut r).await, BUSY_FUNCTION);
    assert_eq!(
        m.call(&["EXEC"]).await,
        err(&format!(
            "EXECABORT Transaction discarded because of: {BUSY_FUNCTION}"
        ))
    );
    // MULTI is served, a queued command refused (the EXEC then aborts).
    assert_eq!(m.call(&["MULTI"]).await, Frame::ok());
    assert_eq!(m.call(&["INCR", "xx"]).await, err(BUSY_FUNCTION));
    // FUNCTION STATS shows the running call; SCRIPT KILL is for EVALs.
    let stats = words(&r.call(&["FUNCTION", "STATS"]).await).join(" ");
    assert!(
        stats.starts_with("running_script name spin command fcall spin 0 duration_ms"),
        "{stats}"
    );
    assert_eq!(r.call(&["SCRIPT", "KILL"]).await, err(BUSY_FUNCTION));
    assert_eq!(r.call(&["FUNCTION", "KILL"]).await, Frame::ok());
    let reply = runner.await.unwrap();
    assert!(error_text(&reply).contains("killed by user"), "{reply:?}");
    assert_eq!(
        m.call(&["EXEC"]).await,
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    assert_eq!(r.call(&["GET", "xx"]).await, bulk("1"));
    assert_eq!(
        r.call(&["FUNCTION", "KILL"]).await,
        err("NOTBUSY No scripts in execution right now.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_scripts_are_atomic() {
    const TOTAL: i64 = 1000;
    let server = start(config());
    let addr = server.addr();
    let mut r = Raw::connect(addr).await;
    assert_eq!(
        r.call(&["MSET", "acct:a", "500", "acct:b", "500"]).await,
        Frame::ok()
    );
    // Reads both, moves 1 from one to the other, returns what it read.
    let mover = "local a = tonumber(redis.call('get', KEYS[1])) \
                 local b = tonumber(redis.call('get', KEYS[2])) \
                 redis.call('set', KEYS[1], a - 1) \
                 redis.call('set', KEYS[2], b + 1) \
                 return {a, b}";
    let reader =
        "return {tonumber(redis.call('get', KEYS[1])), tonumber(redis.call('get', KEYS[2]))}";
    let mut tasks = Vec::new();
    for task in 0..6 {
        tasks.push(tokio::spawn(async move {
            let mut r = Raw::connect(addr).await;
            let (from, to) = if task % 2 == 0 {
                ("acct:a", "acct:b")
            } else {
                ("acct:b", "acct:a")
            };
            let mut wrong = Vec::new();
            for _ in 0..150 {
                let reply = if task % 3 == 2 {
                    r.call(&["EVAL_RO", reader, "2", from, to]).await
                } else {
                    eval(&mut r, mover, &[from, to], &[]).await
                };
                match reply {
                    Frame::Array(items) => match items.as_slice() {
                        [Frame::Integer(x), Frame::Integer(y)] if x + y == TOTAL => {}
                        _ => wrong.push(Frame::Array(items)),
                    },
                    other => wrong.push(other),
                }
            }
            wrong
        }));
    }
    for task in tasks {
        let wrong = task.await.unwrap();
        assert!(wrong.is_empty(), "inconsistent reads: {wrong:?}");
    }
    let reply = r.call(&["MGET", "acct:a", "acct:b"]).await;
    let values: Vec<i64> = match reply {
        Frame::Array(items) => items
            .iter()
            .map(|f| match f {
                Frame::Bulk(b) => std::str::from_utf8(b).unwrap().parse().unwrap(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    };
    assert_eq!(values.iter().sum::<i64>(), TOTAL);
    // Movers 0 and 4 move a->b, 1 and 3 b->a, 150 times each: back to even.
    assert_eq!(values, vec![500, 500]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_libraries_beside_the_rust_functions() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let library = "#!lua name=mylib\n\
        redis.register_function('lua_incr', function(keys, args)\n\
          return redis.call('incrby', keys[1], args[1])\n\
        end)\n\
        redis.register_function{function_name = 'lua_get', callback = function(keys)\n\
          return redis.call('get', keys[1])\n\
        end, flags = {'no-writes'}, description = 'reads a key'}\n";
    assert_eq!(r.call(&["FUNCTION", "LOAD", library]).await, bulk("mylib"));
    assert_eq!(
        r.call(&["FUNCTION", "LOAD", library]).await,
        err("ERR Library 'mylib' already exists")
    );
    assert_eq!(
        r.call(&["FUNCTION", "LOAD", "REPLACE", library]).await,
        bulk("mylib")
    );
    assert_eq!(
        r.call(&["FCALL", "lua_incr", "1", "n", "5"]).await,
        Frame::Integer(5)
    );
    assert_eq!(r.call(&["FCALL_RO", "lua_get", "1", "n"]).await, bulk("5"));
    assert_eq!(
        r.call(&["FCALL_RO", "lua_incr", "1", "n", "5"]).await,
        err("ERR Can not execute a script with write flag using *_ro command.")
    );
    assert_eq!(
        r.call(&["FCALL", "lua_incr", "2", "n"]).await,
        err("ERR Number of keys can't be greater than number of args")
    );
    // The Rust functions still answer, and keep their names.
    assert_eq!(r.call(&["MSET", "a", "10", "b", "5"]).await, Frame::ok());
    assert_eq!(
        r.call(&["FCALL_RO", "sum", "2", "a", "b"]).await,
        Frame::Integer(15)
    );
    assert_eq!(
        r.call(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=clash\nredis.register_function('sum', function() return 1 end)"
        ])
        .await,
        err("ERR Function sum already exists")
    );
    assert_eq!(
        r.call(&["FUNCTION", "LOAD", "return 1"]).await,
        err("ERR Missing library metadata")
    );
    assert_eq!(
        r.call(&["FUNCTION", "LOAD", "#!lua name=empty\nlocal x = 1"])
            .await,
        err("ERR No functions registered")
    );
    let listed = words(&r.call(&["FUNCTION", "LIST", "WITHCODE"]).await).join(" ");
    for word in [
        "mylib",
        "LUA",
        "lua_incr",
        "lua_get",
        "no-writes",
        "reads a key",
    ] {
        assert!(listed.contains(word), "{word} missing from {listed}");
    }
    // The Rust library is listed when LIBRARYNAME names it.
    assert!(!listed.contains("RUST"), "{listed}");
    let listed = words(&r.call(&["FUNCTION", "LIST", "LIBRARYNAME", "roo*"]).await).join(" ");
    for word in ["roost", "RUST", "transfer"] {
        assert!(listed.contains(word), "{word} missing from {listed}");
    }
    assert_eq!(r.call(&["FUNCTION", "DELETE", "mylib"]).await, Frame::ok());
    assert_eq!(
        r.call(&["FUNCTION", "DELETE", "mylib"]).await,
        err("ERR Library not found")
    );
    assert_eq!(
        r.call(&["FCALL", "lua_incr", "1", "n", "5"]).await,
        err("ERR Function not found")
    );
    assert_eq!(r.call(&["FUNCTION", "LOAD", library]).await, bulk("mylib"));
    assert_eq!(r.call(&["FUNCTION", "FLUSH"]).await, Frame::ok());
    assert_eq!(
        r.call(&["FCALL", "lua_get", "1", "n"]).await,
        err("ERR Function not found")
    );
    assert_eq!(
        r.call(&["FCALL_RO", "sum", "2", "a", "b"]).await,
        Frame::Integer(15)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_share_the_transaction_of_their_block() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    // Inside MULTI/EXEC a script sees the writes queued before it, and the
    // commands after it see its writes: one transaction.
    assert_eq!(r.call(&["MULTI"]).await, Frame::ok());
    assert_eq!(
        r.call(&["SET", "k", "5"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        eval(
            &mut r,
            "return redis.call('incrby', KEYS[1], 10)",
            &["k"],
            &[]
        )
        .await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(r.call(&["GET", "k"]).await, Frame::Simple("QUEUED".into()));
    assert_eq!(
        r.call(&["EXEC"]).await,
        Frame::Array(vec![Frame::ok(), Frame::Integer(15), bulk("15")])
    );
    // COMMAND knows the scripting commands' keys follow numkeys.
    assert_eq!(
        r.call(&["COMMAND", "GETKEYS", "EVAL", "return 1", "2", "a", "b", "x"])
            .await,
        Frame::Array(vec![bulk("a"), bulk("b")])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_users_get_the_read_only_forms() {
    let mut cfg = config();
    cfg.users = vec![
        User {
            name: "writer".into(),
            password: "w-pass".into(),
            access: Access::ReadWrite,
        },
        User {
            name: "reader".into(),
            password: "r-pass".into(),
            access: Access::ReadOnly,
        },
    ];
    let server = start(cfg);
    let mut w = Raw::connect(server.addr()).await;
    assert_eq!(w.call(&["AUTH", "writer", "w-pass"]).await, Frame::ok());
    assert_eq!(
        eval(
            &mut w,
            "return redis.call('set', KEYS[1], 'v')",
            &["k"],
            &[]
        )
        .await,
        Frame::ok()
    );
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["AUTH", "reader", "r-pass"]).await, Frame::ok());
    assert_eq!(
        eval(&mut r, "return 1", &[], &[]).await,
        err("NOPERM User reader has no permissions to run the 'eval' command")
    );
    assert_eq!(
        r.call(&["EVAL_RO", "return redis.call('get', KEYS[1])", "1", "k"])
            .await,
        bulk("v")
    );
    assert_eq!(
        r.call(&["EVAL_RO", "return redis.call('del', KEYS[1])", "1", "k"])
            .await,
        err("ERR Write commands are not allowed from read-only scripts.")
    );
    let reply = r
        .call(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=l\nredis.register_function('f', function() return 1 end)",
        ])
        .await;
    assert!(error_text(&reply).starts_with("NOPERM"), "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_scripts_get_replies_not_crashes() {
    let server = start(limited(200));
    let mut r = Raw::connect(server.addr()).await;
    // Bytecode is refused: only source text loads.
    let reply = eval(&mut r, "\u{1b}LuaQ\0\u{1}\u{4}\u{8}", &[], &[]).await;
    assert!(
        error_text(&reply).starts_with("ERR Error compiling script"),
        "{reply:?}"
    );
    // Token soup, deterministic: every script gets some reply and the
    // connection stays up.
    let tokens = [
        "return",
        "redis.call(",
        "redis.pcall(",
        "'get'",
        "'set'",
        "KEYS[1]",
        "ARGV[1]",
        ",",
        ")",
        "{",
        "}",
        "nil",
        "1",
        "-1",
        "0/0",
        "1e308*10",
        "'x'",
        "..",
        "#",
        "local a =",
        "a",
        "end",
        "function()",
        "pcall(",
        "error(",
        "cjson.encode(",
        "cjson.decode(",
        "string.rep('x', 99)",
        "setmetatable({}, {__index = function() return redis.call('get', KEYS[1]) end}).x",
        "xpcall(",
        "unpack({1,2})",
        "math.huge",
        "tostring(",
        "{err='E'}",
        "{ok='O'}",
    ];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..300 {
        let mut script = String::new();
        for _ in 0..(seed % 12 + 1) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            script.push_str(tokens[(seed % tokens.len() as u64) as usize]);
            script.push(' ');
        }
        let _ = eval(&mut r, &script, &["k"], &["v"]).await;
    }
    assert_eq!(r.call(&["PING"]).await, Frame::Simple("PONG".into()));
}

/// A script's state is kept for its next run on the thread (compiling and
/// setting up a sandbox cost more than a short script): each run still gets
/// its own KEYS and ARGV, a run that raised leaves nothing behind, and no
/// other script meets what one left in a library table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_script_states_give_each_run_its_own_arguments_and_no_leftovers() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let echo = "return {KEYS[1], ARGV[1], #KEYS, #ARGV}";
    for i in 0..50 {
        let (k, a) = (format!("k{i}"), format!("a{i}"));
        let mut keys = vec![k.as_str()];
        let mut args = vec![a.as_str()];
        if i % 2 == 1 {
            keys.push("second");
            args.push("more");
        }
        let n = keys.len() as i64;
        assert_eq!(
            eval(&mut r, echo, &keys, &args).await,
            Frame::Array(vec![
                bulk(&k),
                bulk(&a),
                Frame::Integer(n),
                Frame::Integer(n)
            ])
        );
    }
    // A script that marks the (writable) string metatable, then raises:
    // its next run starts from a fresh state.
    let marks = "local mt = getmetatable('') local seen = mt.roost_mark mt.roost_mark = 1 \
                 if ARGV[1] == 'raise' then error('raised') end return seen";
    for _ in 0..4 {
        let e = eval(&mut r, marks, &[], &["raise"]).await;
        assert!(error_text(&e).contains("raised"), "{e:?}");
    }
    // No raising run kept its state: the next run sees no mark.
    assert_eq!(eval(&mut r, marks, &[], &["keep"]).await, Frame::Null);
    // Another script never sees the mark, however often the first ran.
    for _ in 0..8 {
        let _ = eval(&mut r, marks, &[], &["keep"]).await;
        assert_eq!(
            eval(&mut r, "return string.roost_mark", &[], &[]).await,
            Frame::Null
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lua_libraries_answer_as_redis_does() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    // Each expected value is redis-server 7.0.15's answer.
    let cases: Vec<(&str, Frame)> = vec![
        (
            "return {bit.tobit(2^32 + 5), bit.bnot(0), bit.band(7, 3), bit.bor(1,2,4,8,16,32,64,128), \
             bit.bxor(1, 2), bit.lshift(1, 31), bit.rshift(-1, 28), bit.arshift(-16, 2), \
             bit.rol(1, 33), bit.ror(1, 1), bit.bswap(1)}",
            Frame::Array(
                [5, -1, 3, 255, 3, -2147483648, 15, -4, 2, -2147483648, 16777216]
                    .into_iter()
                    .map(Frame::Integer)
                    .collect(),
            ),
        ),
        (
            "return bit.tohex(-1, -4)..bit.tohex(65535)",
            bulk("FFFF0000ffff"),
        ),
        (
            "local e = cmsgpack.pack(0.1) local h = '' for i = 1, #e do h = h .. string.format('%02x', string.byte(e, i)) end return h",
            bulk("cb3fb999999999999a"),
        ),
        (
            "local e = cmsgpack.pack(-1099511627776) local h = '' for i = 1, #e do h = h .. string.format('%02x', string.byte(e, i)) end return h",
            bulk("d3ffffff0000000000"),
        ),
        (
            "local t = cmsgpack.unpack(cmsgpack.pack({1, 'two', {x = 3}})) return {t[1], t[2], t[3].x}",
            Frame::Array(vec![Frame::Integer(1), bulk("two"), Frame::Integer(3)]),
        ),
        (
            "local a = {y = 5} a.x = a local re = cmsgpack.unpack(cmsgpack.pack(a)) \
             return {re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.y, re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x == nil}",
            Frame::Array(vec![Frame::Integer(5), Frame::Integer(1)]),
        ),
        (
            "return {cmsgpack.unpack_one(cmsgpack.pack(1, 2), 0)}",
            Frame::Array(vec![Frame::Integer(1), Frame::Integer(1)]),
        ),
        (
            "return cjson.encode({['a/b'] = 1})",
            bulk(r#"{"a\/b":1}"#),
        ),
        ("cjson.encode_keep_buffer(false) return 1", Frame::Integer(1)),
        // Large tables (more entries than mlua's reference stack holds).
        (
            "local m = {} for i = 1, 100000 do m[tostring(i)] = i end \
             local t = cmsgpack.unpack(cmsgpack.pack(m)) \
             return {t['77777'], #cjson.encode(m) > 0}",
            Frame::Array(vec![Frame::Integer(77777), Frame::Integer(1)]),
        ),
        // pcall of a C function.
        (
            "local ok = pcall(cjson.encode, {[false] = 1}) return ok",
            Frame::Null,
        ),
        ("return redis.REDIS_VERSION_NUM > 0", Frame::Integer(1)),
        ("return loadstring('return 7')()", Frame::Integer(7)),
        (
            "return loadstring(string.dump(function() return 1 end))",
            Frame::Null,
        ),
        (
            "local a = {} for i = 1, 7999 do a[i] = 1 end return redis.call('lpush', 'l', unpack(a))",
            Frame::Integer(7999),
        ),
    ];
    for (script, expected) in cases {
        assert_eq!(eval(&mut r, script, &[], &[]).await, expected, "{script}");
    }
    for (script, needle) in [
        ("cmsgpack.pack = 1", "Attempt to modify a readonly table"),
        ("bit.lshift = 1", "Attempt to modify a readonly table"),
        ("string.x = 1", "Attempt to modify a readonly table"),
        ("return cmsgpack.unpack('\\217')", "Missing bytes in input."),
        ("return cmsgpack.pack()", "MessagePack pack needs input."),
        ("redis.setresp(4)", "RESP version must be 2 or 3."),
        ("redis.set_repl(12345)", "Invalid replication flags"),
        ("redis.sha1hex()", "wrong number of arguments"),
        (
            "return loadstring(string.dump(function() return 1 end))()",
            "attempt to call a nil value",
        ),
        ("redis.call('cluster', 'reset')", "command is not allowed"),
    ] {
        let reply = eval(&mut r, script, &[], &[]).await;
        assert!(error_text(&reply).contains(needle), "{script}: {reply:?}");
    }
    assert_eq!(
        eval(
            &mut r,
            "return redis.error_reply('MY_ERR_CODE custom msg')",
            &[],
            &[]
        )
        .await,
        err("MY_ERR_CODE custom msg")
    );
    assert_eq!(
        eval(&mut r, "return redis.error_reply('')", &[], &[]).await,
        err("ERR ")
    );
    // redis.setresp(3): a map reply comes back a map (a RESP2 client reads
    // it flat).
    assert_eq!(r.call(&["HSET", "h", "f", "v"]).await, Frame::Integer(1));
    let hgetall = "redis.setresp(3) return redis.call('hgetall', KEYS[1])";
    assert_eq!(
        eval(&mut r, hgetall, &["h"], &[]).await,
        Frame::Array(vec![bulk("f"), bulk("v")])
    );
    assert_eq!(
        eval(
            &mut r,
            "redis.setresp(3) return redis.call('hgetall', KEYS[1]).map.f",
            &["h"],
            &[]
        )
        .await,
        bulk("v")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_dump_restore_and_the_library_environment() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    let lib = |name: &str, f: &str, body: &str| {
        format!(
            "#!lua name={name}\nredis.register_function('{f}', function(keys, args) {body} end)"
        )
    };
    assert_eq!(
        r.call(&["FUNCTION", "LOAD", &lib("test", "test", "return 'hello'")])
            .await,
        bulk("test")
    );
    // Function names are case-insensitive.
    assert_eq!(r.call(&["FCALL", "TEST", "0"]).await, bulk("hello"));
    let dump = match r.call(&["FUNCTION", "DUMP"]).await {
        Frame::Bulk(b) => b,
        other => panic!("{other:?}"),
    };
    let restore = |payload: &[u8], policy: Option<&str>| {
        let mut args = vec![b"FUNCTION".to_vec(), b"RESTORE".to_vec(), payload.to_vec()];
        args.extend(policy.map(|p| p.as_bytes().to_vec()));
        let mut wire = Vec::new();
        Frame::Array(args.into_iter().map(Frame::Bulk).collect())
            .encode(roost_resp::protocol::Protocol::Resp2, &mut wire);
        wire
    };
    // A bad payload: Redis's error, nothing dropped.
    for bad in [&b"bad_payload"[..], &dump[..dump.len() - 1], b""] {
        let wire = restore(bad, None);
        r.send(&wire).await;
        assert_eq!(
            r.frame().await.unwrap(),
            err("ERR DUMP payload version or checksum are wrong")
        );
    }
    let mut flipped = dump.clone();
    flipped[10] ^= 1;
    let wire = restore(&flipped, None);
    r.send(&wire).await;
    assert_eq!(
        r.frame().await.unwrap(),
        err("ERR DUMP payload version or checksum are wrong")
    );
    assert_eq!(r.call(&["FCALL", "test", "0"]).await, bulk("hello"));
    // APPEND (the default) refuses a library that exists.
    let wire = restore(&dump, None);
    r.send(&wire).await;
    assert_eq!(
        r.frame().await.unwrap(),
        err("ERR Library test already exists")
    );
    // FLUSH: only the payload's libraries.
    assert_eq!(
        r.call(&["FUNCTION", "LOAD", &lib("other", "other", "return 2")])
            .await,
        bulk("other")
    );
    let wire = restore(&dump, Some("FLUSH"));
    r.send(&wire).await;
    assert_eq!(r.frame().await.unwrap(), Frame::ok());
    assert_eq!(
        r.call(&["FCALL", "other", "0"]).await,
        err("ERR Function not found")
    );
    // REPLACE: the payload's version wins.
    assert_eq!(
        r.call(&[
            "FUNCTION",
            "LOAD",
            "REPLACE",
            &lib("test", "test", "return 'hello1'")
        ])
        .await,
        bulk("test")
    );
    let wire = restore(&dump, Some("REPLACE"));
    r.send(&wire).await;
    assert_eq!(r.frame().await.unwrap(), Frame::ok());
    assert_eq!(r.call(&["FCALL", "test", "0"]).await, bulk("hello"));
    let wire = restore(&dump, Some("BOGUS"));
    r.send(&wire).await;
    assert!(error_text(&r.frame().await.unwrap()).contains("Wrong restore policy"));
    assert!(
        error_text(&r.call(&["FUNCTION", "RESTORE", "a", "b", "c"]).await)
            .contains("wrong number of arguments for 'RESTORE'")
    );
    // While the code loads it sees only `redis` (register_function, log,
    // the version); its functions see the script globals, without
    // register_function.
    for (code, needle) in [
        (
            "#!lua name=l2\nreturn math.random()",
            "nonexistent global variable 'math'",
        ),
        (
            "#!lua name=l2\nreturn redis.call('ping')",
            "nonexistent global variable 'call'",
        ),
        ("#!lua name=l2\na = 1", "Attempt to modify a readonly table"),
    ] {
        let reply = r.call(&["FUNCTION", "LOAD", code]).await;
        assert!(error_text(&reply).contains(needle), "{code}: {reply:?}");
    }
    assert_eq!(
        r.call(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=l3\nlocal function ping() return redis.call('ping') end\n\
             redis.register_function('f1', function() return ping() end)\n\
             redis.register_function('f2', function() redis.register_function('f3', function() end) end)\n\
             redis.register_function('v', function() return bit.band(redis.REDIS_VERSION_NUM, 255) end)"
        ])
        .await,
        bulk("l3")
    );
    assert_eq!(
        r.call(&["FCALL", "f1", "0"]).await,
        Frame::Simple("PONG".into())
    );
    assert!(error_text(&r.call(&["FCALL", "f2", "0"]).await)
        .contains("attempt to call field 'register_function' (a nil value)"));
    assert!(matches!(
        r.call(&["FCALL", "v", "0"]).await,
        Frame::Integer(_)
    ));
    // Metadata as Redis parses it.
    assert_eq!(
        r.call(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=\"quoted\"\nredis.register_function('q', function() return 1 end)"
        ])
        .await,
        bulk("quoted")
    );
    assert_eq!(
        r.call(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=a name=b\nredis.register_function('z', function() end)"
        ])
        .await,
        err("ERR Invalid metadata value, name argument was given multiple times")
    );
    assert_eq!(
        r.call(&[
            "FUNCTION",
            "LOAD",
            "#! name=a\nredis.register_function('z', function() end)"
        ])
        .await,
        err("ERR Engine '' not found")
    );
}

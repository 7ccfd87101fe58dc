//! FCALL and FCALL_RO over the wire: the shipped functions (`transfer`,
//! `sum`, `reserve`), Redis's error texts, refusals that apply nothing (also
//! inside MULTI/EXEC), read-only users, functions an embedding application
//! registers, and concurrent transfers whose total a concurrent read-only
//! `sum` always sees whole: a check shown to catch a planted fault (a call's
//! writes applied in a second transaction).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{config, connect, err, q, start, Raw};
use roost_resp::protocol::Frame;
use roost_resp::{Access, Function, FunctionCtx, FunctionError, FunctionFuture, Functions};
use roost_resp::{Server, User};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_functions_and_redis_error_texts() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["MSET", "a", "100", "b", "5"]).await, Frame::ok());
    assert_eq!(
        r.call(&["FCALL", "transfer", "2", "a", "b", "30"]).await,
        ints(&[70, 35])
    );
    // Refused: nothing written.
    assert_eq!(
        r.call(&["FCALL", "transfer", "2", "b", "a", "36"]).await,
        err("ERR insufficient funds: 35 < 36")
    );
    assert_eq!(
        r.call(&["MGET", "a", "b"]).await,
        Frame::Array(vec![Frame::bulk("70"), Frame::bulk("35")])
    );
    assert_eq!(
        r.call(&["FCALL_RO", "sum", "3", "a", "b", "absent"]).await,
        Frame::Integer(105)
    );
    assert_eq!(
        r.call(&["FCALL", "sum", "2", "a", "b"]).await,
        Frame::Integer(105)
    );
    // A key named twice is one key.
    assert_eq!(
        r.call(&["FCALL", "transfer", "2", "a", "a", "10"]).await,
        ints(&[60, 70])
    );
    assert_eq!(r.call(&["GET", "a"]).await, Frame::bulk("70"));
    // Redis 7's texts for bad calls.
    for (args, text) in [
        (&["FCALL", "nosuch", "0"][..], "ERR Function not found"),
        (&["FCALL", "sum", "x"], "ERR Bad number of keys provided"),
        (
            &["FCALL", "sum", "-1"],
            "ERR Number of keys can't be negative",
        ),
        (
            &["FCALL", "sum", "2", "a"],
            "ERR Number of keys can't be greater than number of args",
        ),
        (
            &["FCALL_RO", "transfer", "2", "a", "b", "1"],
            "ERR Can not execute a script with write flag using *_ro command.",
        ),
        (
            &["FCALL"],
            "ERR wrong number of arguments for 'fcall' command",
        ),
        (
            &["FCALL", "transfer", "2", "a", "b", "x"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["FCALL", "transfer", "1", "a", "5"],
            "ERR transfer takes 2 keys (from, to) and 1 argument (amount)",
        ),
    ] {
        assert_eq!(r.call(args).await, err(text), "{args:?}");
    }
    assert_eq!(r.call(&["RPUSH", "list", "x"]).await, Frame::Integer(1));
    assert_eq!(
        r.call(&["FCALL_RO", "sum", "1", "list"]).await,
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );

    // reserve: every bounded counter or none.
    assert_eq!(
        r.call(&["BC.CREATE", "apple", "LOWER", "0", "10"]).await,
        Frame::ok()
    );
    assert_eq!(
        r.call(&["BC.CREATE", "pear", "LOWER", "0", "2"]).await,
        Frame::ok()
    );
    assert_eq!(
        r.call(&["FCALL", "reserve", "2", "apple", "pear", "3", "1"])
            .await,
        ints(&[7, 1])
    );
    match r
        .call(&["FCALL", "reserve", "2", "apple", "pear", "3", "2"])
        .await
    {
        Frame::Error(e) => assert!(e.starts_with("BOUND "), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.call(&["BC.GET", "apple"]).await, Frame::Integer(7));
    assert_eq!(r.call(&["BC.GET", "pear"]).await, Frame::Integer(1));
    assert_eq!(
        r.call(&["FCALL", "reserve", "2", "apple", "pear", "1"])
            .await,
        ints(&[6, 0])
    );

    // FUNCTION LIST shows the Lua libraries only; the Rust ones when
    // LIBRARYNAME names them. FLUSH leaves them, STATS does not count them.
    assert_eq!(
        r.call(&["FUNCTION", "LIST"]).await,
        Frame::Array(Vec::new())
    );
    assert_eq!(r.call(&["FUNCTION", "FLUSH"]).await, Frame::ok());
    match r.call(&["FUNCTION", "STATS"]).await {
        Frame::Array(stats) => {
            let text = words(&Frame::Array(stats)).join(" ");
            assert_eq!(
                text,
                "running_script engines LUA libraries_count functions_count"
            );
        }
        other => panic!("{other:?}"),
    }
    match r.call(&["FUNCTION", "LIST", "LIBRARYNAME", "*"]).await {
        Frame::Array(libraries) => {
            assert_eq!(libraries.len(), 1);
            let text = words(&Frame::Array(libraries)).join(" ");
            for needle in ["roost", "transfer", "sum", "reserve", "no-writes", "RUST"] {
                assert!(text.contains(needle), "{needle} in {text}");
            }
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        r.call(&["FUNCTION", "LIST", "LIBRARYNAME", "nope*"]).await,
        Frame::Array(Vec::new())
    );
    // Lua libraries load beside the Rust functions (tests/scripting.rs);
    // one that registers nothing is Redis's error.
    assert_eq!(
        r.call(&["FUNCTION", "LOAD", "#!lua name=x\n"]).await,
        err("ERR No functions registered")
    );
    // The node still serves.
    assert_eq!(r.call(&["PING"]).await, Frame::Simple("PONG".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_inside_multi_applies_nothing_of_its_own() {
    let server = start(config());
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["MSET", "a", "10", "b", "0"]).await, Frame::ok());
    assert_eq!(r.call(&["MULTI"]).await, Frame::ok());
    for args in [
        &["SET", "x", "1"][..],
        &["FCALL", "transfer", "2", "a", "b", "4"],
        &["FCALL", "transfer", "2", "a", "b", "1000"],
        &["INCR", "y"],
        &["FCALL_RO", "sum", "2", "a", "b"],
    ] {
        assert_eq!(r.call(args).await, Frame::Simple("QUEUED".into()));
    }
    assert_eq!(
        r.call(&["EXEC"]).await,
        Frame::Array(vec![
            Frame::ok(),
            ints(&[6, 4]),
            err("ERR insufficient funds: 6 < 1000"),
            Frame::Integer(1),
            Frame::Integer(10),
        ])
    );
    assert_eq!(
        r.call(&["MGET", "a", "b", "x"]).await,
        Frame::Array(vec![Frame::bulk("6"), Frame::bulk("4"), Frame::bulk("1")])
    );
    // Pipelined calls share a batch; the refused one still applies nothing.
    let mut wire = Vec::new();
    for args in [
        ["FCALL", "transfer", "2", "a", "b", "1"],
        ["FCALL", "transfer", "2", "b", "a", "99"],
        ["FCALL", "transfer", "2", "b", "a", "2"],
    ] {
        Frame::Array(args.iter().map(|a| Frame::bulk(a.as_bytes())).collect())
            .encode(roost_resp::protocol::Protocol::Resp2, &mut wire);
    }
    r.send(&wire).await;
    assert_eq!(r.frame().await, Some(ints(&[5, 5])));
    assert_eq!(r.frame().await, Some(err("ERR insufficient funds: 5 < 99")));
    assert_eq!(r.frame().await, Some(ints(&[3, 7])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_users_call_only_no_writes_functions() {
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
    assert_eq!(
        w.call(&["FCALL_RO", "sum", "1", "a"]).await,
        err("NOAUTH Authentication required.")
    );
    assert_eq!(w.call(&["AUTH", "writer", "w-pass"]).await, Frame::ok());
    assert_eq!(w.call(&["SET", "a", "7"]).await, Frame::ok());
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["AUTH", "reader", "r-pass"]).await, Frame::ok());
    assert_eq!(
        r.call(&["FCALL_RO", "sum", "2", "a", "b"]).await,
        Frame::Integer(7)
    );
    assert_eq!(
        r.call(&["FCALL", "transfer", "2", "a", "b", "1"]).await,
        err("NOPERM User reader has no permissions to run the 'fcall' command")
    );
    assert_eq!(r.call(&["GET", "a"]).await, Frame::bulk("7"));
}

/// `swap`: exchanges two keys' strings (absent stays absent).
fn swap<'a>(ctx: &'a FunctionCtx<'a>) -> FunctionFuture<'a> {
    Box::pin(async move {
        let (a, b) = (ctx.get(0).await?, ctx.get(1).await?);
        match b {
            Some(b) => ctx.set(0, b)?,
            None => ctx.del(0)?,
        }
        match a {
            Some(a) => ctx.set(1, a)?,
            None => ctx.del(1)?,
        }
        Ok(Frame::ok())
    })
}

/// Declared no-writes, but writes: refused.
fn sneaky<'a>(ctx: &'a FunctionCtx<'a>) -> FunctionFuture<'a> {
    Box::pin(async move {
        ctx.set(0, "x")?;
        Ok(Frame::ok())
    })
}

/// Reads a key it was not given: refused.
fn greedy<'a>(ctx: &'a FunctionCtx<'a>) -> FunctionFuture<'a> {
    Box::pin(async move {
        let value = ctx.get(ctx.keys().len()).await?;
        Ok(value.map_or(Frame::Null, Frame::Bulk))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_an_application_registers() {
    let mut functions = Functions::new();
    functions
        .register("app", Function::new("swap", swap))
        .unwrap();
    functions
        .register("app", Function::new("sneaky", sneaky).no_writes())
        .unwrap();
    functions
        .register("app", Function::new("greedy", greedy).no_writes())
        .unwrap();
    // A closure capturing state.
    let calls = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&calls);
    functions
        .register(
            "app",
            Function::new("count_calls", move |_ctx| {
                let n = counted.fetch_add(1, Ordering::Relaxed) + 1;
                Box::pin(async move { Ok::<_, FunctionError>(Frame::Integer(n as i64)) })
            })
            .no_writes()
            .description("how many times it ran (attempts, retries included)"),
        )
        .unwrap();
    let server = Server::spawn_with(config(), functions).unwrap();
    let mut r = Raw::connect(server.addr()).await;
    assert_eq!(r.call(&["SET", "x", "1"]).await, Frame::ok());
    assert_eq!(r.call(&["FCALL", "swap", "2", "x", "y"]).await, Frame::ok());
    assert_eq!(
        r.call(&["MGET", "x", "y"]).await,
        Frame::Array(vec![Frame::Null, Frame::bulk("1")])
    );
    assert_eq!(
        r.call(&["FCALL", "sneaky", "1", "y"]).await,
        err("ERR Write commands are not allowed from read-only scripts.")
    );
    assert_eq!(r.call(&["GET", "y"]).await, Frame::bulk("1"));
    assert_eq!(
        r.call(&["FCALL_RO", "greedy", "1", "y"]).await,
        err("ERR function 'greedy' uses key #2 but the call names 1 key(s)")
    );
    assert_eq!(
        r.call(&["FCALL_RO", "count_calls", "0"]).await,
        Frame::Integer(1)
    );
    // Not the shipped library: this server serves the application's only.
    assert_eq!(
        r.call(&["FCALL", "transfer", "2", "x", "y", "1"]).await,
        err("ERR Function not found")
    );
    assert!(calls.load(Ordering::Relaxed) >= 1);
}

const ACCOUNTS: usize = 6;
const INITIAL: i64 = 1000;

/// Concurrent `transfer`s (half of them pipelined four deep) and read-only
/// `sum`s over every account. Returns the sums that did not see the total
/// and the final total.
async fn transfers_and_sums(
    functions: Functions,
    clients: usize,
    rounds: usize,
) -> (Vec<i64>, i64) {
    let server = Server::spawn_with(config(), functions).unwrap();
    let addr = server.addr();
    let keys: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct:{i}")).collect();
    let mut c = connect(addr).await;
    for key in &keys {
        let _: () = q(&mut c, &["SET", key, &INITIAL.to_string()])
            .await
            .unwrap();
    }
    let total = INITIAL * ACCOUNTS as i64;
    let mut tasks = Vec::new();
    for client in 0..clients {
        let keys = keys.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            let mut wrong_sums = Vec::new();
            let mut moved = 0usize;
            for round in 0..rounds {
                if client % 3 == 2 {
                    let mut cmd = redis::cmd("FCALL_RO");
                    cmd.arg("sum").arg(ACCOUNTS);
                    for key in &keys {
                        cmd.arg(key);
                    }
                    let sum: i64 = cmd.query_async(&mut c).await.unwrap();
                    if sum != total {
                        wrong_sums.push(sum);
                    }
                    continue;
                }
                let mut pipe = redis::pipe();
                let depth = if client % 2 == 0 { 4 } else { 1 };
                for i in 0..depth {
                    let from = (client + round + i) % ACCOUNTS;
                    let to = (from + 1 + (round * 7 + i) % (ACCOUNTS - 1)) % ACCOUNTS;
                    let amount = 1 + (round + i) % 50;
                    pipe.cmd("FCALL")
                        .arg("transfer")
                        .arg(2)
                        .arg(&keys[from])
                        .arg(&keys[to])
                        .arg(amount);
                }
                // One reply per call: the balances after it, or the
                // function's refusal (insufficient funds); anything else
                // (a connection error, an unknown function) fails the test.
                let replies: Vec<redis::Value> = pipe
                    .ignore_errors()
                    .query_async(&mut c)
                    .await
                    .expect("the pipeline is answered");
                assert_eq!(replies.len(), depth);
                for reply in replies {
                    match reply {
                        redis::Value::Array(balances) => {
                            assert_eq!(balances.len(), 2, "{balances:?}");
                            moved += 1;
                        }
                        redis::Value::ServerError(e)
                            if e.details()
                                .is_some_and(|d| d.contains("insufficient funds")) => {}
                        other => panic!("FCALL transfer answered {other:?}"),
                    }
                }
            }
            (wrong_sums, moved)
        }));
    }
    let mut wrong_sums = Vec::new();
    let mut moved = 0;
    for task in tasks {
        let (wrong, transfers) = task.await.unwrap();
        wrong_sums.extend(wrong);
        moved += transfers;
    }
    // Most transfers go through (amounts are small against the balances):
    // a run where none did would conserve the total trivially.
    assert!(
        moved > clients * rounds / 4,
        "only {moved} transfers went through"
    );
    let mut cmd = redis::cmd("FCALL_RO");
    cmd.arg("sum").arg(ACCOUNTS);
    for key in &keys {
        cmd.arg(key);
    }
    let final_total: i64 = cmd.query_async(&mut c).await.unwrap();
    (wrong_sums, final_total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_conserve_the_total_and_sums_see_it_whole() {
    let (wrong_sums, final_total) = transfers_and_sums(Functions::examples(), 9, 300).await;
    assert!(wrong_sums.is_empty(), "sums off the total: {wrong_sums:?}");
    assert_eq!(final_total, INITIAL * ACCOUNTS as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_catches_calls_split_over_two_transactions() {
    // With the fault, transfers lose updates: some run must show it.
    let mut caught = None;
    for attempt in 0..5 {
        let mut functions = Functions::examples();
        functions.plant_bug_split_transaction();
        let (wrong_sums, final_total) = transfers_and_sums(functions, 9, 300).await;
        if !wrong_sums.is_empty() || final_total != INITIAL * ACCOUNTS as i64 {
            caught = Some((attempt, wrong_sums.len(), final_total));
            break;
        }
    }
    let (attempt, wrong, total) = caught.expect("the planted fault went unnoticed in 5 runs");
    println!("planted fault caught in run {attempt}: {wrong} wrong sums, final total {total}");
}

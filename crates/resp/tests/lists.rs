//! The blocking list commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP)
//! on a real server: a waiting client is woken by another's push, times
//! out with the nil array, gets the replies of what it pipelined before
//! the wait at once, does not hold the executor (others keep being
//! served), is let go when it disconnects, and a wait that pops nothing
//! writes nothing (another client's WATCH holds). Their replies against
//! redis-server are in `redis_compat.rs` (`list_replies_match_...`).

mod common;

use std::time::{Duration, Instant};

use common::{config, err, start, Raw};
use roost_resp::protocol::Frame;

fn bulks(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| Frame::bulk(s.as_bytes())).collect())
}

/// A count of INFO clients (`connected_clients`, `blocked_clients`).
async fn clients_info(raw: &mut Raw, field: &str) -> u64 {
    let text = match raw.call(&["INFO", "clients"]).await {
        Frame::Bulk(text) => String::from_utf8(text).unwrap(),
        other => panic!("INFO: {other:?}"),
    };
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in INFO clients"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_are_woken_by_pushes_from_other_clients() {
    let server = start(config());
    let addr = server.addr();
    let mut pusher = Raw::connect(addr).await;
    // Each blocking form, its command and the reply once `src` gets "x".
    let cases: [(&[&str], Frame); 4] = [
        (&["BRPOP", "nokey", "src", "5"], bulks(&["src", "x"])),
        (
            &["BLMOVE", "src", "dst", "LEFT", "RIGHT", "5"],
            Frame::bulk("x"),
        ),
        (&["BRPOPLPUSH", "src", "dst", "5"], Frame::bulk("x")),
        (
            &["BLMPOP", "5", "2", "nokey", "src", "LEFT", "COUNT", "3"],
            Frame::Array(vec![Frame::bulk("src"), bulks(&["x"])]),
        ),
    ];
    for (command, expected) in cases {
        let mut blocked = Raw::connect(addr).await;
        let started = Instant::now();
        let push = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            pusher.call(&["RPUSH", "src", "x"]).await
        };
        let (reply, pushed) = tokio::join!(blocked.call(command), push);
        assert_eq!(pushed, Frame::Integer(1), "{command:?}");
        assert_eq!(reply, expected, "{command:?}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(90) && waited < Duration::from_secs(4),
            "{command:?} waited {waited:?}"
        );
        // The element moved or went: `src` is gone (an emptied list is deleted).
        assert_eq!(pusher.call(&["EXISTS", "src"]).await, Frame::Integer(0));
    }
    assert_eq!(
        pusher.call(&["LRANGE", "dst", "0", "-1"]).await,
        bulks(&["x", "x"])
    );
    // Three waiting clients, three elements: one each, none twice.
    let (mut a, mut b, mut c) = (
        Raw::connect(addr).await,
        Raw::connect(addr).await,
        Raw::connect(addr).await,
    );
    let wait = ["BLPOP", "many", "5"];
    let push = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        pusher.call(&["RPUSH", "many", "a", "b", "c"]).await
    };
    let (ra, rb, rc, pushed) = tokio::join!(a.call(&wait), b.call(&wait), c.call(&wait), push);
    assert_eq!(pushed, Frame::Integer(3));
    let mut got: Vec<String> = [ra, rb, rc]
        .into_iter()
        .map(|reply| match reply {
            Frame::Array(parts) if parts.len() == 2 && parts[0] == Frame::bulk("many") => {
                match &parts[1] {
                    Frame::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
                    other => panic!("{other:?}"),
                }
            }
            other => panic!("{other:?}"),
        })
        .collect();
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_pipelines_and_other_clients() {
    let server = start(config());
    let addr = server.addr();
    let mut raw = Raw::connect(addr).await;
    // A timeout answers the nil array, for every form (Redis's reply).
    for command in [
        &["BLPOP", "nokey", "0.2"][..],
        &["BLMOVE", "nokey", "dst", "LEFT", "LEFT", "0.2"],
        &["BRPOPLPUSH", "nokey", "dst", "0.2"],
        &["BLMPOP", "0.2", "1", "nokey", "RIGHT"],
    ] {
        let started = Instant::now();
        assert_eq!(raw.call(command).await, Frame::NullArray, "{command:?}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(3),
            "{command:?} waited {waited:?}"
        );
    }
    // Pipelined: the reply before the wait comes at once, the ones after
    // it once the wait is over, in order.
    raw.send(
        b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n\
          *3\r\n$5\r\nBLPOP\r\n$6\r\nnokey2\r\n$3\r\n0.4\r\n\
          *2\r\n$3\r\nGET\r\n$1\r\na\r\n",
    )
    .await;
    let started = Instant::now();
    assert_eq!(raw.frame().await, Some(Frame::ok()));
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "SET's reply waited for the BLPOP: {:?}",
        started.elapsed()
    );
    assert_eq!(raw.frame().await, Some(Frame::NullArray));
    assert!(started.elapsed() >= Duration::from_millis(390));
    assert_eq!(raw.frame().await, Some(Frame::bulk("1")));

    // A client waiting with no timeout holds neither the executor nor a
    // transaction: others are served, and its tries write nothing, so a
    // WATCH of the key it waits on still holds.
    let mut other = Raw::connect(addr).await;
    let before = clients_info(&mut other, "connected_clients").await;
    let mut waiter = Raw::connect(addr).await;
    waiter
        .send(b"*3\r\n$5\r\nBLPOP\r\n$7\r\nforever\r\n$1\r\n0\r\n")
        .await;
    assert_eq!(other.call(&["WATCH", "forever"]).await, Frame::ok());
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..50 {
        let n = i.to_string();
        assert_eq!(
            other.call(&["SET", "busy", &n]).await,
            Frame::ok(),
            "served while another client waits"
        );
    }
    assert_eq!(other.call(&["MULTI"]).await, Frame::ok());
    assert_eq!(
        other.call(&["LLEN", "forever"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        other.call(&["EXEC"]).await,
        Frame::Array(vec![Frame::Integer(0)]),
        "the waiting client's tries wrote nothing"
    );
    assert_eq!(
        clients_info(&mut other, "connected_clients").await,
        before + 1
    );
    // Gone while it waits: its connection ends (it no longer counts).
    drop(waiter);
    let deadline = Instant::now() + Duration::from_secs(5);
    while clients_info(&mut other, "connected_clients").await != before {
        assert!(
            Instant::now() < deadline,
            "a disconnected waiting client is still connected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing was popped for it after it left.
    assert_eq!(
        other.call(&["RPUSH", "forever", "v"]).await,
        Frame::Integer(1)
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(other.call(&["LLEN", "forever"]).await, Frame::Integer(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_forms_do_not_wait_in_multi_or_scripts() {
    let server = start(config());
    let mut raw = Raw::connect(server.addr()).await;
    // Inside MULTI: their non-blocking forms, at once (Redis's nil
    // array for the pops, nil for the moves).
    let started = Instant::now();
    assert_eq!(raw.call(&["MULTI"]).await, Frame::ok());
    for command in [
        &["BLPOP", "nokey", "0"][..],
        &["BLMOVE", "nokey", "d", "LEFT", "LEFT", "0"],
        &["BLMPOP", "0", "1", "nokey", "LEFT"],
    ] {
        assert_eq!(raw.call(command).await, Frame::Simple("QUEUED".into()));
    }
    assert_eq!(
        raw.call(&["EXEC"]).await,
        Frame::Array(vec![Frame::NullArray, Frame::Null, Frame::NullArray])
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // Scripts: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH are refused (Redis's
    // `noscript`), BLMPOP runs as LMPOP.
    for script in [
        "return redis.call('blpop', KEYS[1], 0)",
        "return redis.call('brpop', KEYS[1], 0)",
        "return redis.call('blmove', KEYS[1], KEYS[1], 'left', 'left', 0)",
        "return redis.call('brpoplpush', KEYS[1], KEYS[1], 0)",
    ] {
        assert_eq!(
            raw.call(&["EVAL", script, "1", "k"]).await,
            err("ERR This Redis command is not allowed from script"),
            "{script}"
        );
    }
    assert_eq!(raw.call(&["RPUSH", "k", "a", "b"]).await, Frame::Integer(2));
    assert_eq!(
        raw.call(&[
            "EVAL",
            "return redis.call('blmpop', 0, 1, KEYS[1], 'right', 'count', 5)",
            "1",
            "k"
        ])
        .await,
        Frame::Array(vec![Frame::bulk("k"), bulks(&["b", "a"])])
    );
    assert_eq!(raw.call(&["EXISTS", "k"]).await, Frame::Integer(0));
}

async fn until_blocked(raw: &mut Raw, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while clients_info(raw, "blocked_clients").await != n {
        assert!(Instant::now() < deadline, "never {n} blocked clients");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Blocked clients are served first come, first served, as Redis serves
/// them: the one that waited longest gets the first element, and one whose
/// pop fails (BRPOPLPUSH to a key of another type) leaves the element to
/// the next (Redis's "BRPOPLPUSH with multiple blocked clients").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_clients_are_served_in_the_order_they_began_to_wait() {
    let server = start(config());
    let addr = server.addr();
    let mut r = Raw::connect(addr).await;
    for round in 0..10 {
        let (mut first, mut second) = (Raw::connect(addr).await, Raw::connect(addr).await);
        first.send_command(&["BLPOP", "fifo", "0"]).await;
        until_blocked(&mut r, 1).await;
        second.send_command(&["BLPOP", "fifo", "0"]).await;
        until_blocked(&mut r, 2).await;
        assert_eq!(r.call(&["RPUSH", "fifo", "a"]).await, Frame::Integer(1));
        assert_eq!(
            first.frame().await,
            Some(bulks(&["fifo", "a"])),
            "round {round}: the first to wait gets the first element"
        );
        assert_eq!(r.call(&["RPUSH", "fifo", "b"]).await, Frame::Integer(1));
        assert_eq!(second.frame().await, Some(bulks(&["fifo", "b"])));
    }
    for round in 0..10 {
        assert_eq!(r.call(&["SET", "not-a-list", "x"]).await, Frame::ok());
        let (mut first, mut second) = (Raw::connect(addr).await, Raw::connect(addr).await);
        first
            .send_command(&["BRPOPLPUSH", "src", "not-a-list", "0"])
            .await;
        until_blocked(&mut r, 1).await;
        second
            .send_command(&["BRPOPLPUSH", "src", "dst", "0"])
            .await;
        until_blocked(&mut r, 2).await;
        assert_eq!(r.call(&["LPUSH", "src", "foo"]).await, Frame::Integer(1));
        let Some(Frame::Error(e)) = first.frame().await else {
            panic!("round {round}: the first fails on its destination's type");
        };
        assert!(e.starts_with("WRONGTYPE"), "{e}");
        assert_eq!(second.frame().await, Some(Frame::bulk("foo")));
        assert_eq!(r.call(&["LPOP", "dst"]).await, Frame::bulk("foo"));
    }
    // Several elements pushed at once go one each to the waiters, oldest
    // first.
    for round in 0..5 {
        let mut waiters = Vec::new();
        for n in 1..=4 {
            let mut waiter = Raw::connect(addr).await;
            waiter.send_command(&["BLPOP", "fifo", "0"]).await;
            until_blocked(&mut r, n).await;
            waiters.push(waiter);
        }
        assert_eq!(
            r.call(&["RPUSH", "fifo", "e0", "e1", "e2", "e3"]).await,
            Frame::Integer(4)
        );
        for (i, waiter) in waiters.iter_mut().enumerate() {
            let element = format!("e{i}");
            assert_eq!(
                waiter.frame().await,
                Some(bulks(&["fifo", &element])),
                "round {round}: waiter {i} gets element {i}"
            );
        }
    }
}

/// A push serves the clients it feeds before its own reply goes out, in
/// chains (one waiter's BLMOVE feeds the next), as Redis does ("Linked
/// LMOVEs", "Circular BRPOPLPUSH"); a key that holds another type while
/// they wait does not wake them ("LPUSH + DEL + SET should not awake
/// blocked client").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_serves_its_waiters_before_it_is_answered() {
    let server = start(config());
    let addr = server.addr();
    let mut r = Raw::connect(addr).await;
    let (mut rd1, mut rd2) = (Raw::connect(addr).await, Raw::connect(addr).await);
    rd1.send_command(&["BLMOVE", "l1", "l2", "RIGHT", "LEFT", "0"])
        .await;
    until_blocked(&mut r, 1).await;
    rd2.send_command(&["BLMOVE", "l2", "l3", "LEFT", "RIGHT", "0"])
        .await;
    until_blocked(&mut r, 2).await;
    assert_eq!(r.call(&["RPUSH", "l1", "foo"]).await, Frame::Integer(1));
    for (key, want) in [("l1", vec![]), ("l2", vec![]), ("l3", vec!["foo"])] {
        assert_eq!(
            r.call(&["LRANGE", key, "0", "-1"]).await,
            bulks(&want),
            "{key} right after the push's reply"
        );
    }
    assert_eq!(rd1.frame().await, Some(Frame::bulk("foo")));
    assert_eq!(rd2.frame().await, Some(Frame::bulk("foo")));

    let (mut rd1, mut rd2) = (Raw::connect(addr).await, Raw::connect(addr).await);
    rd1.send_command(&["BRPOPLPUSH", "c1", "c2", "0"]).await;
    until_blocked(&mut r, 1).await;
    rd2.send_command(&["BRPOPLPUSH", "c2", "c1", "0"]).await;
    until_blocked(&mut r, 2).await;
    assert_eq!(r.call(&["RPUSH", "c1", "foo"]).await, Frame::Integer(1));
    assert_eq!(r.call(&["LRANGE", "c1", "0", "-1"]).await, bulks(&["foo"]));
    assert_eq!(r.call(&["LRANGE", "c2", "0", "-1"]).await, bulks(&[]));
    assert_eq!(rd1.frame().await, Some(Frame::bulk("foo")));
    assert_eq!(rd2.frame().await, Some(Frame::bulk("foo")));

    let mut rd = Raw::connect(addr).await;
    rd.send_command(&["BLPOP", "k", "0"]).await;
    until_blocked(&mut r, 1).await;
    assert_eq!(r.call(&["MULTI"]).await, Frame::ok());
    r.call(&["LPUSH", "k", "a"]).await;
    r.call(&["DEL", "k"]).await;
    r.call(&["SET", "k", "foo"]).await;
    assert!(matches!(r.call(&["EXEC"]).await, Frame::Array(_)));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        clients_info(&mut r, "blocked_clients").await,
        1,
        "still waiting"
    );
    assert_eq!(r.call(&["DEL", "k"]).await, Frame::Integer(1));
    assert_eq!(r.call(&["LPUSH", "k", "b"]).await, Frame::Integer(1));
    assert_eq!(rd.frame().await, Some(bulks(&["k", "b"])));
}

/// A push that lands right after a younger client's blocking command was
/// sent (before it blocked, maybe before it first ran) goes to the older
/// waiter first (Redis's "BRPOPLPUSH with multiple blocked clients", which
/// pushes without waiting for the second client to block). A blocking
/// command is queued before it first runs, so no push can slip between its
/// first run and its place in the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_right_after_the_blocking_commands_goes_to_the_first() {
    let server = start(config());
    let addr = server.addr();
    let mut r = Raw::connect(addr).await;
    for round in 0..30 {
        r.call(&["DEL", "blist", "target1", "target2"]).await;
        assert_eq!(r.call(&["SET", "target1", "nolist"]).await, Frame::ok());
        let (mut rd1, mut rd2) = (Raw::connect(addr).await, Raw::connect(addr).await);
        rd1.send_command(&["BRPOPLPUSH", "blist", "target1", "0"])
            .await;
        until_blocked(&mut r, 1).await;
        rd2.send_command(&["BRPOPLPUSH", "blist", "target2", "0"])
            .await;
        assert_eq!(r.call(&["LPUSH", "blist", "foo"]).await, Frame::Integer(1));
        let Some(Frame::Error(e)) = tokio::time::timeout(Duration::from_secs(5), rd1.frame())
            .await
            .unwrap_or_else(|_| panic!("round {round}: the first client is answered"))
        else {
            panic!("round {round}: the first client fails on its destination's type");
        };
        assert!(e.starts_with("WRONGTYPE"), "{e}");
        let second = tokio::time::timeout(Duration::from_secs(5), rd2.frame())
            .await
            .unwrap_or_else(|_| panic!("round {round}: the second client is answered"));
        assert_eq!(second, Some(Frame::bulk("foo")), "round {round}");
    }
}

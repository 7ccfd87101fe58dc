//! Forwarding through the front door: a write the router ships runs at the
//! owner and its reply comes back byte for byte; an owner that refuses the
//! forward user leaves the write to run here; an owner whose reply cannot be
//! read leaves the client told the outcome is unknown, and the connection
//! serving it goes on.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use roost_resp::{Config, Router, RunningServer, Server, Services, FORWARD_USER};

const PASSWORD: &str = "a-password-both-ends-derive";

/// Ships every routed write to one address.
struct To(SocketAddr);

impl Router for To {
    fn route(&self, _reactors: &[usize]) -> Option<SocketAddr> {
        Some(self.0)
    }
}

fn config() -> Config {
    Config {
        bind: "127.0.0.1:0".parse().unwrap(),
        keyspace_reactors: 8,
        executors: 1,
        forward_password: Some(PASSWORD.into()),
        forward_timeout_ms: 2_000,
        ..Config::default()
    }
}

fn start(router: Option<SocketAddr>) -> RunningServer {
    let services = Services {
        router: router.map(|to| Arc::new(To(to)) as Arc<dyn Router>),
        ..Services::examples()
    };
    Server::spawn_with_services(config(), services).expect("server starts")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

fn command(stream: &mut TcpStream, args: &[&str]) -> String {
    let mut frame = format!("*{}\r\n", args.len());
    for arg in args {
        frame.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(frame.as_bytes()).unwrap();
    let mut head = line(stream);
    if head.starts_with('$') && head != "$-1" {
        head = line(stream);
    }
    head
}

fn line(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "closed after {got:?}");
        got.push(byte[0]);
    }
    String::from_utf8(got).unwrap().trim_end().to_owned()
}

#[test]
fn a_shipped_write_runs_at_the_owner_and_a_read_stays_here() {
    let owner = start(None);
    let here = start(Some(owner.addr()));
    let mut client = connect(here.addr());
    assert_eq!(command(&mut client, &["SET", "k", "v"]), "+OK");
    assert_eq!(command(&mut client, &["INCR", "n"]), ":1");
    assert_eq!(command(&mut client, &["APPEND", "k", "w"]), ":2");
    // Reads run here: this server never saw the writes.
    assert_eq!(command(&mut client, &["GET", "k"]), "$-1");
    let mut at_owner = connect(owner.addr());
    assert_eq!(command(&mut at_owner, &["GET", "k"]), "vw");
    assert_eq!(command(&mut at_owner, &["GET", "n"]), "1");
    // A pipeline of writes goes as one shipment; replies in order.
    client
        .write_all(b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n")
        .unwrap();
    assert_eq!(line(&mut client), ":2");
    assert_eq!(line(&mut client), ":3");
    // A MULTI of writes is shipped whole; EXEC's reply is the owner's.
    assert_eq!(command(&mut client, &["MULTI"]), "+OK");
    assert_eq!(command(&mut client, &["INCR", "n"]), "+QUEUED");
    assert_eq!(command(&mut client, &["SET", "m", "x"]), "+QUEUED");
    assert_eq!(command(&mut client, &["EXEC"]), "*2");
    assert_eq!(line(&mut client), ":4");
    assert_eq!(line(&mut client), "+OK");
    assert_eq!(command(&mut at_owner, &["GET", "m"]), "x");
    // A pipeline mixing shipped writes and reads here: each part runs in
    // its place, the replies come in the commands' order.
    client
        .write_all(
            b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n\
              *2\r\n$4\r\nINCR\r\n$1\r\nn\r\n*2\r\n$3\r\nGET\r\n$1\r\nm\r\n",
        )
        .unwrap();
    assert_eq!(line(&mut client), ":5");
    assert_eq!(line(&mut client), "$-1");
    assert_eq!(line(&mut client), ":6");
    assert_eq!(line(&mut client), "$-1");
    // The owner's errors come back as they are.
    assert_eq!(
        command(&mut client, &["INCR", "k"]),
        "-ERR value is not an integer or out of range"
    );
    // The forward user is the cluster's, not a stranger's.
    assert_eq!(
        command(&mut at_owner, &["AUTH", FORWARD_USER, "guess"]),
        "-WRONGPASS invalid username-password pair or user is disabled."
    );
    drop(here);
    drop(owner);
}

#[test]
fn a_script_on_declared_keys_is_shipped_and_an_evalsha_travels_as_its_body() {
    let owner = start(None);
    let here = start(Some(owner.addr()));
    let mut client = connect(here.addr());
    let body = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
    assert_eq!(command(&mut client, &["EVAL", body, "1", "s", "5"]), ":5");
    // Only this server knows the script: its EVALSHA still runs at the
    // owner, which never loaded it.
    let sha = command(&mut client, &["SCRIPT", "LOAD", body]);
    assert_eq!(
        command(&mut client, &["EVALSHA", &sha, "1", "s", "2"]),
        ":7"
    );
    let mut at_owner = connect(owner.addr());
    assert_eq!(command(&mut at_owner, &["GET", "s"]), "7");
    assert_eq!(command(&mut client, &["GET", "s"]), "$-1");
    // An unknown SHA, a keyless script and a read-only one run here.
    assert!(command(&mut client, &["EVALSHA", &"0".repeat(40), "1", "s"]).starts_with("-NOSCRIPT"));
    assert_eq!(command(&mut client, &["EVAL", "return 1", "0"]), ":1");
    assert_eq!(
        command(
            &mut client,
            &["EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "s"]
        ),
        "$-1"
    );
    drop(here);
    drop(owner);
}

#[test]
fn a_resp3_client_gets_resp3_replies_from_the_owner() {
    let owner = start(None);
    let here = start(Some(owner.addr()));
    let mut client = connect(here.addr());
    client
        .write_all(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
        .unwrap();
    // HELLO 3's map: read up to its last pair (the modules' empty array).
    assert!(line(&mut client).starts_with('%'));
    let mut last = String::new();
    while last != "*0" {
        last = line(&mut client);
    }
    assert_eq!(command(&mut client, &["ZADD", "z", "1.5", "m"]), ":1");
    // ZINCRBY's reply is a double in RESP3, a bulk string in RESP2: the
    // owner answered in the client's protocol.
    assert_eq!(command(&mut client, &["ZINCRBY", "z", "1", "m"]), ",2.5");
    assert_eq!(command(&mut client, &["MULTI"]), "+OK");
    assert_eq!(command(&mut client, &["ZINCRBY", "z", "1", "m"]), "+QUEUED");
    assert_eq!(command(&mut client, &["EXEC"]), "*1");
    assert_eq!(line(&mut client), ",3.5");
    let mut resp2 = connect(here.addr());
    assert_eq!(command(&mut resp2, &["ZINCRBY", "z", "1", "m"]), "4.5");
    drop(here);
    drop(owner);
}

/// A fake owner: accepts one connection, answers its first request (the
/// forward user's AUTH) with `auth_reply` and every later read with
/// `reply`.
fn fake_owner(auth_reply: &'static [u8], reply: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut first = true;
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    let answer = if first { auth_reply } else { reply };
                    first = false;
                    if stream.write_all(answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn an_owner_that_refuses_the_forward_user_leaves_the_write_to_run_here() {
    let owner = fake_owner(b"-WRONGPASS no\r\n", b"+OK\r\n");
    let here = start(Some(owner));
    let mut client = connect(here.addr());
    assert_eq!(command(&mut client, &["SET", "k", "v"]), "+OK");
    assert_eq!(command(&mut client, &["GET", "k"]), "v", "it ran here");
    drop(here);
}

#[test]
fn an_unreadable_reply_leaves_the_outcome_unknown_and_the_connection_serving() {
    let owner = fake_owner(b"+OK\r\n", b"?what\r\n");
    let here = start(Some(owner));
    let mut client = connect(here.addr());
    let reply = command(&mut client, &["SET", "k", "v"]);
    assert!(
        reply.starts_with("-ERR the command was shipped") && reply.contains("unknown"),
        "{reply}"
    );
    // Not run here as well (that could apply it twice).
    assert_eq!(command(&mut client, &["GET", "k"]), "$-1");
    assert_eq!(command(&mut client, &["PING"]), "+PONG");
    drop(here);
}

#[test]
fn an_owner_that_never_answers_times_out_as_unknown() {
    let owner = fake_owner(b"+OK\r\n", b"");
    let here = start(Some(owner));
    let mut client = connect(here.addr());
    let asked = std::time::Instant::now();
    let reply = command(&mut client, &["INCR", "n"]);
    assert!(reply.contains("outcome is unknown"), "{reply}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    drop(here);
}

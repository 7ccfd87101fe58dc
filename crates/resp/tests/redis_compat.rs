//! Roost against a real redis-server (Redis 7.0, spawned by the test on a
//! free port): the same table of commands, in order, on one connection to
//! each, and their replies compared **byte for byte** (RESP2, then a RESP3
//! part), except where a value legitimately differs, each marked:
//!
//! - `~N`: an integer within N of Redis's (TTL, PTTL, EXPIRETIME of
//!   relative deadlines: the two servers' clocks are read at different
//!   instants);
//! - `?`: only the reply's type (TIME, CLIENT ID, CLIENT INFO, COMMAND COUNT);
//! - `s`: an array compared as a set (KEYS: Redis answers in hash-table
//!   order, Roost in scan-position order);
//! - `k`: INFO keyspace's `keys=` and `expires=` (not `avg_ttl`).
//!
//! The table covers the keyspace, expiry and string commands of issue 20
//! (their replies and every error text, in Redis's order of checks) and the
//! connection and server commands clients send on connect. A missing
//! redis-server fails the test: run `scripts/install-deps.sh`.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{config, start, Raw};
use roost_resp::protocol::{parse_frame, Frame, Limits};

/// A redis-server of its own, killed when dropped.
struct RedisServer {
    child: Child,
    addr: SocketAddr,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis_server_binary() -> std::path::PathBuf {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("redis-server"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "redis-server is not installed, and this test compares Roost's replies with a real \
             Redis 7's: run scripts/install-deps.sh (Debian's redis-server package)"
        )
    })
}

async fn spawn_redis() -> RedisServer {
    let binary = redis_server_binary();
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(binary)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let server = RedisServer {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(stream) = tokio::net::TcpStream::connect(server.addr).await {
            drop(stream);
            let mut probe = Raw::connect(server.addr).await;
            if probe.call(&["PING"]).await == Frame::Simple("PONG".into()) {
                return server;
            }
        }
        assert!(Instant::now() < deadline, "redis-server did not answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How two replies are compared.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Exact,
    Within(i64),
    Shape,
    Set,
    Keyspace,
}

/// One line of the table: an optional mode, then the arguments (split at
/// spaces; `"..."` quotes, with `\xHH`, `\"` and `\\` inside).
fn parse_line(line: &str) -> (Mode, Vec<Vec<u8>>) {
    let line = line.trim();
    let (mode, rest) = if let Some(rest) = line.strip_prefix('~') {
        let (n, rest) = rest.split_once(' ').expect("~N then the command");
        (Mode::Within(n.parse().expect("a tolerance")), rest)
    } else if let Some(rest) = line.strip_prefix("? ") {
        (Mode::Shape, rest)
    } else if let Some(rest) = line.strip_prefix("s ") {
        (Mode::Set, rest)
    } else if let Some(rest) = line.strip_prefix("k ") {
        (Mode::Keyspace, rest)
    } else {
        (Mode::Exact, line)
    };
    let mut args = Vec::new();
    let bytes = rest.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b' ' {
            i += 1;
            continue;
        }
        let mut arg = Vec::new();
        if bytes[i] == b'"' {
            i += 1;
            while bytes[i] != b'"' {
                if bytes[i] == b'\\' {
                    match bytes[i + 1] {
                        b'x' => {
                            let hex = std::str::from_utf8(&bytes[i + 2..i + 4]).unwrap();
                            arg.push(u8::from_str_radix(hex, 16).unwrap());
                            i += 4;
                        }
                        other => {
                            arg.push(other);
                            i += 2;
                        }
                    }
                } else {
                    arg.push(bytes[i]);
                    i += 1;
                }
            }
            i += 1;
        } else {
            while i < bytes.len() && bytes[i] != b' ' {
                arg.push(bytes[i]);
                i += 1;
            }
        }
        args.push(arg);
    }
    (mode, args)
}

fn frame_of(bytes: &[u8]) -> Frame {
    parse_frame(bytes, &Limits::default())
        .expect("a reply parses")
        .expect("a whole reply")
        .0
}

fn integer_of(frame: &Frame) -> Option<i64> {
    match frame {
        Frame::Integer(n) => Some(*n),
        _ => None,
    }
}

/// `keys=N,expires=M` of INFO keyspace's db0 line (empty without keys).
fn keyspace_counts(frame: &Frame) -> String {
    let text = match frame {
        Frame::Bulk(text) | Frame::Verbatim { text, .. } => {
            String::from_utf8_lossy(text).into_owned()
        }
        other => panic!("INFO keyspace: {other:?}"),
    };
    text.lines()
        .find_map(|l| l.strip_prefix("db0:"))
        .map(|fields| {
            fields
                .split(',')
                .filter(|f| f.starts_with("keys=") || f.starts_with("expires="))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Runs `table` on both servers (one connection each) and collects every
/// difference.
async fn compare(table: &str, redis: &mut Raw, roost: &mut Raw, differences: &mut Vec<String>) {
    for line in table.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (mode, args) = parse_line(line);
        let theirs = redis.call_bytes(&args).await;
        let ours = roost.call_bytes(&args).await;
        let same = match mode {
            Mode::Exact => theirs == ours,
            Mode::Shape => theirs.first() == ours.first(),
            Mode::Within(tolerance) => {
                match (integer_of(&frame_of(&theirs)), integer_of(&frame_of(&ours))) {
                    (Some(a), Some(b)) => (a - b).abs() <= tolerance,
                    _ => false,
                }
            }
            Mode::Set => match (frame_of(&theirs), frame_of(&ours)) {
                (Frame::Array(mut a), Frame::Array(mut b)) => {
                    let key = |f: &Frame| format!("{f:?}");
                    a.sort_by_key(key);
                    b.sort_by_key(key);
                    a == b
                }
                (a, b) => a == b,
            },
            Mode::Keyspace => {
                keyspace_counts(&frame_of(&theirs)) == keyspace_counts(&frame_of(&ours))
            }
        };
        if !same {
            differences.push(format!(
                "{line}\n    redis: {:?}\n    roost: {:?}",
                String::from_utf8_lossy(&theirs),
                String::from_utf8_lossy(&ours)
            ));
        }
    }
}

const KEYS: &str = r#"
FLUSHALL
SET s hello
RPUSH l a b c
HSET h f v
EXISTS s l h nokey s
TYPE s
TYPE l
TYPE h
TYPE nokey
DEL s nokey
UNLINK l nokey
TOUCH h nokey
DEL
TYPE
TYPE a b
UNLINK
TOUCH
SET a 1
RENAME a b
GET b
GET a
RENAME nokey x
RENAME b b
RENAMENX b b
RENAMENX nokey b
SET c 2
RENAMENX b c
RENAMENX b d
GET d
RENAME
RENAME a
COPY d e
COPY d e
COPY d e REPLACE
COPY d d
COPY d e FOO
COPY d e DB
COPY d e DB abc
COPY nokey e
COPY d e DB 0 REPLACE
COPY d
s KEYS *
s KEYS c*
s KEYS [cd]
s KEYS ?
s KEYS nomatch*
s KEYS h\*
KEYS
SCAN abc
SCAN 0 COUNT 0
SCAN 0 COUNT -1
SCAN 0 COUNT abc
SCAN 0 FOO
SCAN 0 MATCH
SCAN 0 COUNT
SCAN
DBSIZE
DBSIZE x
RANDOMKEY x
OBJECT ENCODING c
OBJECT ENCODING nokey
SET emb helloworld
OBJECT ENCODING emb
SET long 0123456789012345678901234567890123456789012345678901234567890
OBJECT ENCODING long
SET bignum 123456789012345678901234
OBJECT ENCODING bignum
RPUSH ql a
OBJECT ENCODING ql
HSET hh f v
OBJECT ENCODING hh
OBJECT
OBJECT FOO k
OBJECT ENCODING
OBJECT ENCODING a b
OBJECT FREQ c
OBJECT FREQ nokey
OBJECT HELP
k INFO keyspace
FLUSHDB FOO
FLUSHDB SYNC ASYNC
FLUSHALL SYNC
DBSIZE
RANDOMKEY
k INFO keyspace
SET only 1
RANDOMKEY
FLUSHDB ASYNC
DBSIZE
"#;

const EXPIRY: &str = r#"
FLUSHALL
SET k v
EXPIRE k 100
~1 TTL k
~1000 PTTL k
~2 EXPIRETIME k
~2000 PEXPIRETIME k
EXPIRE k 50 NX
EXPIRE k 50 XX
EXPIRE k 40 GT
EXPIRE k 60 GT
EXPIRE k 70 LT
EXPIRE k 30 LT
EXPIRE k 30 lt xx
EXPIRE k 10 NX XX
EXPIRE k 10 NX GT
EXPIRE k 10 GT LT
EXPIRE k 10 FOO
EXPIRE k abc
EXPIRE k abc FOO
EXPIRE k 9223372036854775807
EXPIRE k -9223372036854775808
PEXPIRE k 9223372036854775807
EXPIREAT k 9223372036854775807
EXPIRE nokey 10
EXPIRE nokey 10 FOO
PERSIST k
PERSIST k
PERSIST nokey
TTL k
TTL nokey
PTTL nokey
EXPIRETIME k
EXPIRETIME nokey
PEXPIRETIME nokey
EXPIREAT k 4102444800
EXPIRETIME k
PEXPIRETIME k
PEXPIREAT k 4102444800123
PEXPIRETIME k
EXPIRETIME k
EXPIRE k 10 LT
EXPIRE k 20 XX GT
PERSIST k
EXPIRE k 10 GT
EXPIRE k 10 XX
EXPIRE k 10 LT
~1 TTL k
EXPIRE k -1
EXISTS k
SET k v
EXPIREAT k 1
EXISTS k
SET k v
PEXPIRE k 0
GET k
SET k v PX 100000
~1000 PTTL k
SET k v EX 100
~1 TTL k
SET k v EXAT 4102444800
EXPIRETIME k
SET k v PXAT 4102444800123
PEXPIRETIME k
SET k v2 KEEPTTL
PEXPIRETIME k
SET k v3
TTL k
SET k v EX 0
SET k v EX -5
SET k v PX 0
SET k v EXAT 0
SET k v EX abc
SET k v EX 9223372036854775807
SET k v EX 10 PX 10
SET k v EX 10 EXAT 10
SET k v KEEPTTL EX 1
SET k v EX 1 KEEPTTL
SET k v EX
SET k v NX XX
SET k v XX NX
SET k v PERSIST
SET k v EX 10 EX 20
~1 TTL k
SET k v3 GET
SET nk v NX GET
GET nk
SET k v4 XX GET
SET absent v XX GET
SET k v NX
SET k v NX GET
RPUSH l2 a
SET l2 v GET
SET l2 v NX GET
SET k v PXAT 1
GET k
EXISTS k
SETEX k 100 v
~1 TTL k
SETEX k 0 v
SETEX k -1 v
SETEX k abc v
SETEX k 9223372036854775807 v
PSETEX k 100000 v
~1000 PTTL k
PSETEX k 0 v
PSETEX k abc v
SETEX k 10
PSETEX k
GETEX k
GETEX k PERSIST
TTL k
GETEX k EX 100
~1 TTL k
GETEX k PX 100000
~1000 PTTL k
GETEX k EXAT 4102444800
EXPIRETIME k
GETEX k PXAT 4102444800123
PEXPIRETIME k
GETEX k PERSIST
PEXPIRETIME k
GETEX k EX 0
GETEX k EX -1
GETEX k EX abc
GETEX k PX 9223372036854775807
GETEX k PERSIST EX 1
GETEX k EX 1 PERSIST
GETEX k EX 1 PX 1
GETEX k EX
GETEX k FOO
GETEX k KEEPTTL
GETEX k NX
GETEX nokey EX abc
GETEX nokey FOO
GETEX l2
GETEX l2 EX abc
GETEX k EXAT 1
EXISTS k
GETEX
TTL
TTL a b
PERSIST
EXPIRE k
EXPIREAT k
PEXPIRE
EXPIRETIME a b
SET v1 a EX 1000
SET v2 b PX 1000000
SET v3 c
k INFO keyspace
"#;

const STRINGS: &str = r#"
FLUSHALL
RPUSH l2 a
SETNX sn a
SETNX sn b
GET sn
SETNX l2 x
SETNX sn
GETSET sn c
GETSET nokey2 x
GET nokey2
GETSET l2 x
GETSET sn
GETDEL sn
GETDEL sn
GETDEL l2
GETDEL
APPEND ap hello
APPEND ap " world"
GET ap
APPEND l2 x
APPEND ap
STRLEN ap
STRLEN nokey
STRLEN l2
SET n 12345
STRLEN n
INCR n
STRLEN n
APPEND n 7
GET n
STRLEN
GETRANGE ap 0 4
GETRANGE ap -5 -1
GETRANGE ap 5 3
GETRANGE ap -1 -5
GETRANGE ap -3 -100
GETRANGE ap 0 100
GETRANGE ap -100 100
GETRANGE ap 100 200
GETRANGE ap a 1
GETRANGE ap 1 a
GETRANGE nokey 0 1
GETRANGE nokey a 1
GETRANGE l2 0 1
GETRANGE n 0 1
GETRANGE ap 0
SUBSTR ap 0 2
SUBSTR ap 0
SETRANGE sr 5 hi
GET sr
SETRANGE sr 0 ab
GET sr
SETRANGE sr 6 xyz
GET sr
SETRANGE sr -1 x
SETRANGE sr abc x
SETRANGE nokey3 10 ""
EXISTS nokey3
SETRANGE sr 3 ""
SETRANGE l2 0 x
SETRANGE l2 -1 x
SETRANGE sr 536870912 x
SETRANGE n 0 9
GET n
SETRANGE sr 0
MSETNX m1 1 m2 2
MSETNX m2 x m3 y
EXISTS m3
GET m2
MSETNX m1
MSETNX a 1 b
MSETNX l2 x
SET f 10.5
INCRBYFLOAT f 0.1
INCRBYFLOAT f -1.1
INCRBYFLOAT f 1e3
INCRBYFLOAT f 0x10
INCRBYFLOAT f 5.0e3
INCRBYFLOAT f abc
INCRBYFLOAT f inf
INCRBYFLOAT f -inf
INCRBYFLOAT f nan
INCRBYFLOAT f ""
INCRBYFLOAT l2 abc
INCRBYFLOAT l2 1
GET f
SET fs " 11"
INCRBYFLOAT fs 1
SET fs "11 "
INCRBYFLOAT fs 1
SET fs "1\x002"
INCRBYFLOAT fs 1
INCRBYFLOAT nokeyf 5
INCRBYFLOAT nokeyf 0.25
SET g 0.1
INCRBYFLOAT g 0.2
SET g 17179869184
INCRBYFLOAT g 1.5
INCRBYFLOAT g 17179869184
SET g 1
INCRBYFLOAT g -1.1
SET g 5
INCRBYFLOAT g -5
SET g -0.5
INCRBYFLOAT g 0.5
SET g 1.5e10
INCRBYFLOAT g 1
SET g 3
INCRBYFLOAT g +1
INCRBYFLOAT g .5
INCRBYFLOAT g 1.
INCRBYFLOAT g 1E2
INCRBYFLOAT g
SETBIT b 7 1
SETBIT b 7 1
GETBIT b 7
GETBIT b 6
GETBIT b 100
GET b
SETBIT b 7 0
GET b
SETBIT b 20 1
GET b
SETBIT b -1 1
SETBIT b 1 2
SETBIT b 1 -1
SETBIT b 1 abc
SETBIT b abc 1
SETBIT b 4294967296 1
SETBIT l2 1 1
SETBIT l2 -1 1
SETBIT b 1
GETBIT nokey 5
GETBIT b 4294967296
GETBIT b -1
GETBIT b abc
GETBIT l2 0
GETBIT l2 abc
SET ns 5
GETBIT ns 5
SETBIT ns 6 1
GET ns
SET fb foobar
BITCOUNT fb
BITCOUNT fb 0 0
BITCOUNT fb 1 1
BITCOUNT fb 1 1 BYTE
BITCOUNT fb 1 1 byte
BITCOUNT fb 5 30 BIT
BITCOUNT fb 5 30 bit
BITCOUNT fb -2 -5
BITCOUNT fb -5 -2
BITCOUNT fb 0 -1 BIT
BITCOUNT fb 100 200
BITCOUNT fb -100 -1
BITCOUNT fb 1
BITCOUNT fb 0 1 foo
BITCOUNT fb 0 1 bit extra
BITCOUNT fb a b
BITCOUNT fb 0 b
BITCOUNT nokey a b
BITCOUNT nokey 1
BITCOUNT l2
BITCOUNT l2 a
BITCOUNT
SET bp "\xff\xf0\x00"
BITPOS bp 0
BITPOS bp 1
BITPOS bp 1 2
BITPOS bp 0 1
BITPOS bp 0 0 0
BITPOS bp 0 0 1
BITPOS bp 1 1 -1
BITPOS bp 0 -1
BITPOS bp 1 7 15 BIT
BITPOS bp 0 7 15 BIT
BITPOS bp 0 0 7 BIT
BITPOS bp 0 0 11 bit
BITPOS bp 1 5 3
BITPOS bp 1 -1 -3
BITPOS bp 0 100
BITPOS bp 2
BITPOS bp -1
BITPOS bp abc
BITPOS nokey 1 abc
BITPOS nokey 0
BITPOS nokey 1
BITPOS bp 1 a
BITPOS bp 1 0 a
BITPOS bp 0 1 2 byte x
BITPOS bp 1 0 -1 foo
BITPOS l2 1
BITPOS l2 2
BITPOS bp
SET allones "\xff\xff"
BITPOS allones 0
BITPOS allones 0 0 -1
BITPOS allones 0 1
SET empty ""
BITPOS empty 0
BITPOS empty 1
BITCOUNT empty
BITOP AND dest fb ap
GET dest
BITOP OR dest fb ap
GET dest
BITOP XOR dest fb ap
GET dest
BITOP NOT dest fb
GET dest
BITOP not dest fb
BITOP NOT dest fb ap
BITOP FOO dest fb
BITOP AND dest l2
BITOP AND dest fb l2
BITOP AND dest nokey nokey2
EXISTS dest
BITOP OR dest2 fb nokey
GET dest2
BITOP AND dest
"#;

const SERVER: &str = r#"
FOO a b
FOO
GET
EXPIRE k
SETEX
GETEX
INCRBYFLOAT k
BITOP AND d
ECHO
ECHO hi
? TIME
TIME x
PING
PING hi
SELECT 0
SELECT abc
? CLIENT ID
CLIENT SETNAME worker
CLIENT GETNAME
CLIENT SETNAME "a b"
CLIENT SETNAME x y
CLIENT GETNAME x
CLIENT ID x
CLIENT FOO
CLIENT
CLIENT NO-EVICT on
CLIENT NO-EVICT off
CLIENT NO-EVICT maybe
CLIENT NO-EVICT
CLIENT LIST TYPE foo
CLIENT LIST ID abc
CLIENT LIST FOO
CLIENT LIST ID
CLIENT INFO x
? CLIENT INFO
? CLIENT LIST
? CLIENT LIST TYPE normal
CLIENT LIST TYPE pubsub
CONFIG GET maxmemory
CONFIG GET maxmemory-policy
CONFIG GET appendonly
CONFIG GET save
CONFIG GET notify-keyspace-events
CONFIG GET timeout
CONFIG GET no-such-parameter
CONFIG GET no-such-*
CONFIG GET
CONFIG SET
CONFIG SET hz
CONFIG SET foo bar
CONFIG SET databases 4
CONFIG SET hz abc
CONFIG SET hz 10
CONFIG GET hz
CONFIG SET maxmemory-policy noeviction
CONFIG SET appendonly no
CONFIG FOO
CONFIG
CONFIG RESETSTAT
CONFIG RESETSTAT x
COMMAND GETKEYS SET k v
COMMAND GETKEYS MSET a 1 b 2
COMMAND GETKEYS DEL a b c
COMMAND GETKEYS RENAME a b
COMMAND GETKEYS BITOP AND d a b
COMMAND GETKEYS EXPIRE k 10
COMMAND GETKEYS foo
COMMAND GETKEYS foo x
COMMAND GETKEYS PING x
COMMAND GETKEYS GET a b
COMMAND GETKEYS GET
COMMAND GETKEYS
COMMAND GETKEYS FCALL f 1 k a
COMMAND GETKEYS OBJECT ENCODING k
COMMAND GETKEYS COPY a b REPLACE
COMMAND GETKEYS MSETNX a 1 b 2
COMMAND FOO
? COMMAND COUNT
COMMAND COUNT x
MULTI
SET a 1
EXPIRE a abc
INCR a
TTL a
EXPIRE a 100 XX
EXEC
MULTI
EXPIRE a
SET a 2
EXEC
MULTI
SET t 1
PEXPIRE t 1
GETEX t PERSIST
TTL t
EXEC
DBSIZE
k INFO keyspace
"#;

/// The RESP3 part: replies whose type changes with HELLO 3.
const RESP3: &str = r#"
FLUSHALL
SET k v
CONFIG GET maxmemory
CONFIG GET no-such-parameter
GETEX nokey
OBJECT ENCODING nokey
GET nokey
SET k v NX GET
SET nk v XX
SCAN abc
s KEYS *
TTL nokey
INCRBYFLOAT f 1.5
? CLIENT INFO
"#;

/// Keys with the characters patterns treat specially, and patterns over
/// them: KEYS (as sets) must agree with Redis's `stringmatchlen` on each.
/// Keys with the characters patterns treat specially, and patterns over
/// them: KEYS (as sets) must agree with Redis's `stringmatchlen` on each.
/// (Table escapes: `\\` is a backslash, `\xHH` a byte.)
const GLOB_KEYS: &[&str] = &[
    r"hello",
    r"hallo",
    r"hllo",
    r"heeeello",
    r"h*llo",
    r"h?llo",
    r"h[e]llo",
    r"h\\llo",
    r"a-b",
    r"a]b",
    r"[x]",
    r"x",
    r"xy",
    r"^a",
    r"\xff\xfe",
    r"ab\x00c",
    r"user:1",
    r"user:12",
    r"user:1:cart",
    r"caf\xc3\xa9",
    r"-",
    r"]",
    r"\\",
    r"\\\\",
    r"",
];

const GLOB_PATTERNS: &[&str] = &[
    r"*",
    r"h?llo",
    r"h*llo",
    r"h[ae]llo",
    r"h[^e]llo",
    r"h[a-b]llo",
    r"h[b-a]llo",
    r"h\\*llo",
    r"h\\?llo",
    r"*\\*",
    r"[",
    r"[x",
    r"[x]",
    r"\\[x\\]",
    r"a[]-]b",
    r"a[\\]]b",
    r"a[-]b",
    r"a[-z]b",
    r"a[z-]b",
    r"[^x]",
    r"[^]",
    r"user:*",
    r"user:?",
    r"user:*:*",
    r"*:*",
    r"**",
    r"?*",
    r"*?",
    r"\\",
    r"\\\\",
    r"caf?",
    r"caf??",
    r"*\xff*",
    r"[\xfe-\xff]*",
    r"[\x00-\x7f]*",
    r"ab?c",
    r"ab*c",
    r"-",
    r"[-]",
    r"]",
    r"*]*",
    r"x*y*z",
    r"[a-c]*",
    r"*[",
    r"h[e-e]llo",
    r"h[e-]llo",
    r"h\\",
    r"\\\\*",
    r"[\\\\]",
    r"[\\]",
    r"",
];

async fn compare_globs(redis: &mut Raw, roost: &mut Raw, differences: &mut Vec<String>) {
    let mut table = String::from("FLUSHALL\n");
    for key in GLOB_KEYS {
        table.push_str(&format!("SET \"{key}\" 1\n"));
    }
    for pattern in GLOB_PATTERNS {
        table.push_str(&format!("s KEYS \"{pattern}\"\n"));
    }
    compare(&table, redis, roost, differences).await;
}

/// Every key SCAN returns (to cursor 0) with these options.
async fn scan_all(raw: &mut Raw, options: &[&str]) -> Vec<Vec<u8>> {
    let mut cursor = b"0".to_vec();
    let mut keys = Vec::new();
    for _ in 0..100_000 {
        let mut args = vec![b"SCAN".to_vec(), cursor.clone()];
        args.extend(options.iter().map(|o| o.as_bytes().to_vec()));
        match frame_of(&raw.call_bytes(&args).await) {
            Frame::Array(parts) => match parts.as_slice() {
                [Frame::Bulk(next), Frame::Array(batch)] => {
                    for key in batch {
                        match key {
                            Frame::Bulk(key) => keys.push(key.clone()),
                            other => panic!("SCAN key {other:?}"),
                        }
                    }
                    cursor = next.clone();
                }
                other => panic!("SCAN reply {other:?}"),
            },
            other => panic!("SCAN reply {other:?}"),
        }
        if cursor == b"0" {
            keys.sort();
            keys.dedup();
            return keys;
        }
    }
    panic!("SCAN {options:?} did not finish");
}

/// A keyspace of several types, some keys expired: a full SCAN with each
/// set of options returns the same keys from both servers.
async fn compare_scans(redis: &mut Raw, roost: &mut Raw, differences: &mut Vec<String>) {
    let mut table = String::from("FLUSHALL\n");
    for i in 0..300 {
        table.push_str(&match i % 5 {
            0 => format!("SET str:{i} v\n"),
            1 => format!("RPUSH list:{i} a\n"),
            2 => format!("HSET hash:{i} f v\n"),
            3 => format!("SET gone:{i} v PX 1\n"),
            _ => format!("SET ttl:{i} v EX 1000\n"),
        });
    }
    compare(&table, redis, roost, differences).await;
    // Let the PX 1 keys expire.
    tokio::time::sleep(Duration::from_millis(20)).await;
    for options in [
        &[][..],
        &["COUNT", "1"],
        &["COUNT", "7"],
        &["COUNT", "1000"],
        &["MATCH", "str:*"],
        &["MATCH", "*1*", "COUNT", "3"],
        &["MATCH", "gone:*"],
        &["TYPE", "list"],
        &["TYPE", "HASH", "COUNT", "2"],
        &["TYPE", "string", "MATCH", "ttl:*"],
        &["TYPE", "zset"],
        &["TYPE", "nosuchtype"],
        &["MATCH", "nomatch*", "COUNT", "5"],
    ] {
        let (a, b) = (
            scan_all(redis, options).await,
            scan_all(roost, options).await,
        );
        if a != b {
            differences.push(format!(
                "SCAN to the end with {options:?}: redis {} keys, roost {} keys",
                a.len(),
                b.len()
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_match_a_real_redis_server() {
    let redis = spawn_redis().await;
    let roost = start(config());
    let mut theirs = Raw::connect(redis.addr).await;
    let mut ours = Raw::connect(roost.addr()).await;
    let mut differences = Vec::new();
    for table in [KEYS, EXPIRY, STRINGS, SERVER] {
        compare(table, &mut theirs, &mut ours, &mut differences).await;
    }
    compare_globs(&mut theirs, &mut ours, &mut differences).await;
    compare_scans(&mut theirs, &mut ours, &mut differences).await;
    let hello = ["HELLO", "3"].map(|a| a.as_bytes().to_vec());
    let (a, b) = (
        theirs.call_bytes(&hello).await,
        ours.call_bytes(&hello).await,
    );
    assert_eq!((a[0], b[0]), (b'%', b'%'), "HELLO 3 answers a map");
    compare(RESP3, &mut theirs, &mut ours, &mut differences).await;
    assert!(
        differences.is_empty(),
        "{} replies differ from redis-server's:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

#[test]
fn table_lines_parse() {
    let (mode, args) = parse_line(r#"~5 SET "a b" "\x00\"" c"#);
    assert_eq!(mode, Mode::Within(5));
    assert_eq!(
        args,
        vec![
            b"SET".to_vec(),
            b"a b".to_vec(),
            b"\x00\"".to_vec(),
            b"c".to_vec()
        ]
    );
    assert_eq!(parse_line("? TIME").0, Mode::Shape);
    assert_eq!(parse_line(r#"SETRANGE k 1 """#).1[3], Vec::<u8>::new());
}

//! Roost against a real redis-server (Redis 7.0, spawned by the test on a
//! free port): the same table of commands, in order, on one connection to
//! each, and their replies compared **byte for byte** (RESP2, then a RESP3
//! part), except where a value legitimately differs, each marked:
//!
//! - `~N`: an integer within N of Redis's (TTL, PTTL, EXPIRETIME of
//!   relative deadlines: the two servers' clocks are read at different
//!   instants);
//! - `?`: only the reply's type (TIME, CLIENT ID, CLIENT INFO, COMMAND COUNT);
//! - `s`: an array (or RESP3 set) compared as a set (KEYS, SMEMBERS,
//!   SINTER..: Redis answers in hash-table order, Roost in scan-position
//!   order);
//! - `k`: INFO keyspace's `keys=` and `expires=` (not `avg_ttl`).
//!
//! The table covers the keyspace, expiry and string commands of issue 20,
//! the hash, set and sorted-set commands (their replies and every error
//! text, in Redis's order of checks; HSCAN, SSCAN and ZSCAN compared as
//! whole scans) and the
//! connection and server commands clients send on connect. A missing
//! redis-server fails the test: run `scripts/install-deps.sh`.

mod common;

use std::time::{Duration, Instant};

use common::redis_server::{frame_of, spawn_redis, split_args};
use common::{config, start, Raw};
use roost_resp::protocol::Frame;

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
    let args = split_args(rest);
    (mode, args)
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
                (Frame::Array(mut a), Frame::Array(mut b))
                | (Frame::Set(mut a), Frame::Set(mut b)) => {
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
MEMORY HELP
MEMORY USAGE nokey
MEMORY USAGE nokey SAMPLES x
MEMORY USAGE nokey foo
MEMORY USAGE c SAMPLES x
MEMORY USAGE c SAMPLES 3 extra
? MEMORY USAGE c
? MEMORY USAGE hh SAMPLES 0
? MEMORY USAGE ql
MEMORY USAGE
MEMORY
MEMORY FOO
MEMORY PURGE
? MEMORY DOCTOR
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
CONFIG GET hash-max-ziplist-entries
CONFIG GET hash-max-listpack-value
CONFIG GET list-max-ziplist-size
CONFIG GET set-max-intset-entries
CONFIG SET list-max-ziplist-size abc
CONFIG SET set-max-intset-entries -1
CONFIG SET list-compress-depth -1
CONFIG SET list-max-listpack-size 2147483648
CONFIG SET hash-max-ziplist-value 10
CONFIG GET hash-max-listpack-value
CONFIG GET hash-max-ziplist-value
CONFIG SET zset-max-ziplist-entries 16 list-max-ziplist-size -1
CONFIG GET zset-max-listpack-entries
CONFIG GET list-max-listpack-size
CONFIG SET zset-max-ziplist-entries 8 set-max-intset-entries x
CONFIG GET zset-max-ziplist-entries
CONFIG SET hash-max-ziplist-value 64
CONFIG SET zset-max-ziplist-entries 128 list-max-ziplist-size -2
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

/// The set commands: replies, flags, WRONGTYPE and every argument error in
/// Redis's order of checks; an emptied set is deleted; RENAME, COPY, TYPE,
/// OBJECT ENCODING, expiry and FLUSHALL over sets. (`?`: SPOP's pick is
/// random.)
const SETS: &str = r#"
FLUSHALL
SADD s a b c
SADD s a d
SADD s
SCARD s
SCARD nokey
s SMEMBERS s
SMEMBERS nokey
SISMEMBER s a
SISMEMBER s zz
SISMEMBER nokey a
SMISMEMBER s a zz d
SMISMEMBER nokey a b
SMISMEMBER s
SREM s a zz
SREM s
SREM nokey a
SCARD s
TYPE s
OBJECT ENCODING s
SADD ints 1 2 3 -5
OBJECT ENCODING ints
SADD ints x
OBJECT ENCODING ints
SET str v
SADD str a
SREM str a
SMEMBERS str
SISMEMBER str a
SMISMEMBER str a
SCARD str
SPOP str
SRANDMEMBER str
SINTER s str
SUNION str s
SDIFF s str
SMOVE str s a
SMOVE s str b
SSCAN str 0
SINTERCARD 1 str
SADD one x
SREM one x
EXISTS one
TYPE one
SADD one x
SPOP one
EXISTS one
SPOP nokey
SPOP nokey 3
SPOP s 0
SPOP str 0
SPOP s -1
SPOP s abc
SPOP s 1 2
SADD p a b c
s SPOP p 5
EXISTS p
SADD p a b c d e f
? SPOP p 2
SCARD p
SRANDMEMBER nokey
SRANDMEMBER nokey 5
SRANDMEMBER nokey -5
SRANDMEMBER s 0
SRANDMEMBER s abc
SRANDMEMBER s -9223372036854775808
SRANDMEMBER s 1 2
SADD r a b c
s SRANDMEMBER r 3
s SRANDMEMBER r 10
s SRANDMEMBER r 9223372036854775807
SADD r1 x
SRANDMEMBER r1
SRANDMEMBER r1 -3
SRANDMEMBER r1 1
SCARD r
FLUSHALL
SADD a 1 2 3 4 x
SADD b 3 4 5 y x
SADD c 4 5 6 x
s SINTER a b
s SINTER a b c
SINTER a nokey
SINTER nokey a
s SINTER a
s SUNION a b c
s SUNION a nokey
SUNION nokey
s SDIFF a b
s SDIFF a b c
s SDIFF a nokey
SDIFF nokey a
s SDIFF b a
SINTER
SINTERSTORE d a b
s SMEMBERS d
SUNIONSTORE d a b c
SCARD d
SDIFFSTORE d a b c
s SMEMBERS d
SINTERSTORE d a nokey
EXISTS d
SET d string
SUNIONSTORE d a
TYPE d
SADD e 1
SDIFFSTORE e e
EXISTS e
SINTERSTORE a a b
s SMEMBERS a
SINTERSTORE d
SINTERCARD 2 a b
SINTERCARD 3 a b c
SINTERCARD 2 a b LIMIT 1
SINTERCARD 2 a b LIMIT 0
SINTERCARD 2 a b LIMIT 100
SINTERCARD 2 a nokey
SINTERCARD 1 nokey
SINTERCARD 0 a
SINTERCARD -1 a
SINTERCARD abc a
SINTERCARD 3 a b
SINTERCARD 2 a b LIMIT -1
SINTERCARD 2 a b LIMIT abc
SINTERCARD 2 a b LIMIT
SINTERCARD 2 a b FOO 1
SINTERCARD 1
FLUSHALL
SADD src a b c
SADD dst x
SMOVE src dst a
s SMEMBERS src
s SMEMBERS dst
SMOVE src dst zz
SMOVE nokey dst a
SMOVE src newdst b
TYPE newdst
SMOVE src src c
SMOVE src src zz
SMOVE src dst c
EXISTS src
SMOVE dst dst2 x
SET strk v
SMOVE nokey strk a
SMOVE dst strk a
SMOVE strk dst a
SMOVE dst
SADD m1 a
SADD m2 a
SMOVE m1 m2 a
EXISTS m1
SCARD m2
FLUSHALL
SADD sc a b c d e f g h i j k l m n o p
SSCAN nokey 0
SSCAN nokey 0 COUNT 0
SSCAN nokey abc
SSCAN sc abc
SSCAN sc 0 COUNT 0
SSCAN sc 0 COUNT abc
SSCAN sc 0 COUNT -1
SSCAN sc 0 MATCH
SSCAN sc 0 FOO bar
SSCAN sc 0 TYPE set
SSCAN sc
SADD big 1
SADD "" a
s SMEMBERS ""
SADD binary "\x00\x01" "a b" ""
s SMEMBERS binary
SISMEMBER binary ""
SCARD binary
SET plain x
SADD plain2 a
RENAME plain2 ren
s SMEMBERS ren
EXISTS plain2
COPY ren cp
s SMEMBERS cp
SADD cp extra
SCARD ren
SCARD cp
COPY ren cp
COPY ren cp REPLACE
SCARD cp
RENAME ren plain
TYPE plain
s SMEMBERS plain
SADD other q
RENAMENX plain other
RENAMENX plain fresh
s SMEMBERS fresh
RENAME fresh fresh
SMEMBERS fresh
SET fresh overwritten
TYPE fresh
SADD fresh x
SCARD fresh
DEL fresh
SADD fresh y
s SMEMBERS fresh
SADD ttl a b
EXPIRE ttl 100
SADD ttl c
~1 TTL ttl
SREM ttl a
~1 TTL ttl
? SPOP ttl
~1 TTL ttl
PERSIST ttl
TTL ttl
k INFO keyspace
s KEYS *
DBSIZE
FLUSHALL
DBSIZE
SMEMBERS plain
SADD plain fresh
s SMEMBERS plain
"#;

/// The sorted-set commands: ZADD's flags and their conflicts, scores as
/// Redis reads and prints them (inf, hex, `-0`, 17 digits), every range
/// form (ranks, `(` bounds, lex `[`/`(`/`-`/`+`, REV, LIMIT, WITHSCORES),
/// ranks, removal by range, pops, ZUNION/ZINTER/ZDIFF (WEIGHTS, AGGREGATE,
/// sets as inputs, NaN from `inf * 0` or `inf - inf`), the STORE forms,
/// and the same key commands as for sets.
const ZSETS: &str = r#"
FLUSHALL
ZADD z 1 a 2 b 3 c
ZADD z 1 a
ZADD z 10 a
ZSCORE z a
ZADD z CH 10 a 20 b 4 d
ZADD z NX 100 a 5 e
ZSCORE z a
ZADD z XX 100 a 5 f
ZSCORE z a
ZSCORE z f
ZADD z XX CH 100 a 200 b
ZADD z GT 50 a 300 b
ZADD z GT CH 50 a 300 b 7 g
ZSCORE z g
ZADD z LT CH 50 a 400 b
ZADD z LT XX 1 a
ZADD z INCR 5 a
ZADD z INCR 5 newone
ZADD z NX INCR 5 a
ZADD z XX INCR 5 nope
ZADD z GT INCR -1 a
ZADD z LT INCR -1 a
ZADD z INCR CH 1 a
ZADD z NX XX 1 a
ZADD z NX GT 1 a
ZADD z NX LT 1 a
ZADD z GT LT 1 a
ZADD z INCR 1 a 2 b
ZADD z 1
ZADD z 1 a 2
ZADD z abc a
ZADD z nan a
ZADD z 1e400 a
ZADD z "1 " a
ZADD z " 1" a
ZADD z "" a
ZADD z FOO 1 a
ZADD z nx
ZADD z 1 a 1 a
ZADD dup 1 x 2 x
ZSCORE dup x
ZADD dup CH 3 x 4 x
ZADD z inf inf -inf ninf +inf pinf 1.5 half 0x10 hex 1e2 hundred .5 dot -0 negz 1e-310 tiny
ZRANGE z 0 -1 WITHSCORES
ZINCRBY z 1 inf
ZINCRBY z -inf inf
ZINCRBY z 1.5 half
ZINCRBY z 1 new
ZINCRBY z abc half
ZINCRBY z 0.1 half
ZINCRBY z 0.2 half
ZADD z INCR 0.1 half
ZINCRBY nokey 1 m
ZSCORE nokey m
ZSCORE z nomember
ZMSCORE z half nomember inf
ZMSCORE nokey a b
ZCARD z
ZCARD nokey
TYPE z
OBJECT ENCODING z
SET str v
ZADD str 1 a
ZINCRBY str 1 a
ZSCORE str a
ZMSCORE str a
ZCARD str
ZRANGE str 0 -1
ZRANK str a
ZREM str a
ZCOUNT str 0 1
ZPOPMIN str
ZSCAN str 0
ZUNION 1 str
ZINTERSTORE dst 1 str
ZRANGESTORE dst str 0 -1
FLUSHALL
ZADD r 1 a 2 b 3 c 4 d 5 e 5 f 5 g 6 h
ZRANGE r 0 -1
ZRANGE r 0 -1 WITHSCORES
ZRANGE r 2 4
ZRANGE r -3 -1
ZRANGE r -100 100
ZRANGE r 5 2
ZRANGE r 100 200
ZRANGE r 0 -1 REV
ZRANGE r 0 1 REV WITHSCORES
ZRANGE r 0 -1 withscores rev
ZREVRANGE r 0 2
ZREVRANGE r 0 2 WITHSCORES
ZREVRANGE r 0 2 LIMIT 0 1
ZREVRANGE r 0 2 REV
ZRANGE r a b
ZRANGE r 0 -1 LIMIT 0 2
ZRANGE r 0 -1 LIMIT 0 -1
ZRANGE r 0 -1 FOO
ZRANGE r 0 -1 LIMIT 0
ZRANGE r 0 -1 LIMIT a b
ZRANGE r (1 5 BYSCORE
ZRANGE r 1 5 BYSCORE
ZRANGE r 1 (5 BYSCORE
ZRANGE r -inf +inf BYSCORE WITHSCORES
ZRANGE r -inf +inf BYSCORE LIMIT 2 3
ZRANGE r -inf +inf BYSCORE LIMIT -1 3
ZRANGE r -inf +inf BYSCORE LIMIT 1 -1
ZRANGE r -inf +inf BYSCORE LIMIT 1 0
ZRANGE r 5 1 BYSCORE REV
ZRANGE r 5 (1 BYSCORE REV WITHSCORES
ZRANGE r (5 (5 BYSCORE
ZRANGE r 5 5 BYSCORE
ZRANGE r 6 1 BYSCORE
ZRANGE r abc 1 BYSCORE
ZRANGE r 1 nan BYSCORE
ZRANGE r "" 1 BYSCORE
ZRANGE r ( 1 BYSCORE
ZRANGE r " 2" 3 BYSCORE
ZRANGE r 1e400 -1e400 BYSCORE REV
ZRANGE r 0x2 3 BYSCORE
ZRANGE r 2abc 3 BYSCORE
ZRANGE r [1 3 BYSCORE
ZRANGE r 1 3 BYSCORE BYSCORE
ZRANGE r 1 3 BYSCORE BYLEX
ZRANGE r 1 3 REV REV
ZRANGEBYSCORE r 1 3
ZRANGEBYSCORE r 1 3 WITHSCORES
ZRANGEBYSCORE r -inf inf LIMIT 1 2 WITHSCORES
ZRANGEBYSCORE r -inf inf WITHSCORES LIMIT 1 2
ZRANGEBYSCORE r 1 3 BYSCORE
ZRANGEBYSCORE r 1 3 REV
ZRANGEBYSCORE r x 3
ZREVRANGEBYSCORE r 3 1
ZREVRANGEBYSCORE r +inf -inf WITHSCORES LIMIT 0 3
ZREVRANGEBYSCORE r (5 (2
ZREVRANGEBYSCORE r 1 3
ZRANGEBYSCORE nokey 1 3
ZRANGE nokey 0 -1
ZRANGE nokey x y
ZRANGE nokey 0 -1 BYLEX
FLUSHALL
ZADD l 0 a 0 b 0 c 0 d 0 e 0 f 0 g
ZRANGE l - + BYLEX
ZRANGE l [b [d BYLEX
ZRANGE l (b (d BYLEX
ZRANGE l (b + BYLEX LIMIT 1 2
ZRANGE l + - BYLEX REV
ZRANGE l [d (a BYLEX REV
ZRANGE l [d (a BYLEX REV LIMIT 0 2
ZRANGE l - + BYLEX WITHSCORES
ZRANGE l + - BYLEX
ZRANGE l - - BYLEX
ZRANGE l [z [a BYLEX
ZRANGE l [a [a BYLEX
ZRANGE l (a [a BYLEX
ZRANGE l a b BYLEX
ZRANGE l +a [b BYLEX
ZRANGE l [ [c BYLEX
ZRANGE l ( (c BYLEX
ZRANGEBYLEX l [b [d
ZRANGEBYLEX l - + LIMIT 2 2
ZRANGEBYLEX l - + WITHSCORES
ZRANGEBYLEX l [b
ZREVRANGEBYLEX l [d [b
ZREVRANGEBYLEX l + - LIMIT 1 1
ZLEXCOUNT l - +
ZLEXCOUNT l [b (e
ZLEXCOUNT l b e
ZLEXCOUNT nokey - +
ZLEXCOUNT l + -
FLUSHALL
ZADD rk 1 a 2 b 3 c 4 d 5 e
ZRANK rk a
ZRANK rk e
ZRANK rk c
ZRANK rk nomember
ZRANK nokey a
ZREVRANK rk a
ZREVRANK rk e
ZREVRANK rk nomember
ZRANK rk
ZREM rk a zz
ZREM rk zz
ZREM nokey a
ZREM rk
ZRANGE rk 0 -1
ZREM rk b c d e
EXISTS rk
FLUSHALL
ZADD rr 1 a 2 b 3 c 4 d 5 e 6 f
ZREMRANGEBYRANK rr 0 1
ZRANGE rr 0 -1
ZREMRANGEBYRANK rr -1 -1
ZREMRANGEBYRANK rr 10 20
ZREMRANGEBYRANK rr a 1
ZREMRANGEBYRANK nokey 0 1
ZREMRANGEBYSCORE rr (3 4
ZRANGE rr 0 -1 WITHSCORES
ZREMRANGEBYSCORE rr x 1
ZREMRANGEBYSCORE rr -inf +inf
EXISTS rr
ZADD rl 0 a 0 b 0 c 0 d
ZREMRANGEBYLEX rl [b (d
ZRANGE rl 0 -1
ZREMRANGEBYLEX rl a b
ZREMRANGEBYLEX rl - +
EXISTS rl
ZREMRANGEBYLEX nokey - +
FLUSHALL
ZADD c 1 a 2 b 3 c 4 d
ZCOUNT c -inf +inf
ZCOUNT c (1 3
ZCOUNT c 2 2
ZCOUNT c (2 2
ZCOUNT c 4 1
ZCOUNT c a 1
ZCOUNT nokey 0 1
ZCOUNT c "" 3
FLUSHALL
ZADD p 1 a 2 b 3 c 4 d
ZPOPMIN p
ZPOPMAX p
ZPOPMIN p 0
ZPOPMIN p -1
ZPOPMIN p abc
ZPOPMIN p 1 2
ZPOPMIN p 10
EXISTS p
ZPOPMIN p
ZPOPMIN p 2
ZPOPMAX nokey
ZPOPMAX nokey 3
ZADD p 1 a 2 b 3 c
ZPOPMAX p 2
ZPOPMIN str
FLUSHALL
ZADD za 1 a 2 b 3 c
ZADD zb 10 b 20 c 30 d
SADD sa a d e
ZUNION 2 za zb
ZUNION 2 za zb WITHSCORES
ZUNION 2 za zb WEIGHTS 2 3 WITHSCORES
ZUNION 2 za zb AGGREGATE MIN WITHSCORES
ZUNION 2 za zb AGGREGATE MAX WITHSCORES
ZUNION 3 za zb sa WITHSCORES
ZUNION 2 za nokey WITHSCORES
ZUNION 1 nokey
ZINTER 2 za zb WITHSCORES
ZINTER 2 za zb WEIGHTS 1 -1 WITHSCORES
ZINTER 2 za zb AGGREGATE MAX WITHSCORES
ZINTER 2 za sa WITHSCORES
ZINTER 2 za nokey
ZINTER 3 za zb sa
ZINTERCARD 2 za zb
ZINTERCARD 2 za zb LIMIT 1
ZINTERCARD 2 za zb LIMIT 0
ZINTERCARD 2 za sa
ZINTERCARD 2 za nokey
ZINTERCARD 1 za
ZINTERCARD 0 za
ZINTERCARD -1 za
ZINTERCARD 3 za zb
ZINTERCARD 2 za zb LIMIT -1
ZINTERCARD 2 za zb LIMIT
ZINTERCARD 2 za zb FOO 1
ZINTERCARD 2 za str
ZADD zm1 1 a 2 b 3 c
ZADD zm2 10 x
ZMPOP 1 zm1 MIN
ZMPOP 1 zm1 MAX COUNT 1
ZMPOP 2 nokey zm2 max count 5
EXISTS zm2
ZMPOP 2 nokey zm2 MIN
ZMPOP 3 nokey zm1 zm2 MIN COUNT 10
ZMPOP 1 nokey MIN
ZMPOP 0 zm1 MIN
ZMPOP -1 zm1 MIN
ZMPOP x zm1 MIN
ZMPOP 2 zm1 MIN
ZMPOP 1 zm1
ZMPOP 1 zm1 MID
ZMPOP 1 zm1 MIN COUNT 0
ZMPOP 1 zm1 MIN COUNT -1
ZMPOP 1 zm1 MIN COUNT x
ZMPOP 1 zm1 MIN COUNT
ZMPOP 1 zm1 MIN COUNT 1 COUNT 2
ZMPOP 1 zm1 MIN LIMIT 1
ZMPOP 1 str MIN
ZMPOP 2 nokey str MIN
ZMPOP 1
ZMPOP 9223372036854775808 zm1 MIN
ZADD zone 1.5 only
ZRANDMEMBER zone
ZRANDMEMBER zone 1
ZRANDMEMBER zone 5
ZRANDMEMBER zone -3
ZRANDMEMBER zone 1 WITHSCORES
ZRANDMEMBER zone -2 WITHSCORES
ZRANDMEMBER zone 0
ZRANDMEMBER zone 0 WITHSCORES
ZRANDMEMBER nokey
ZRANDMEMBER nokey 3
ZRANDMEMBER nokey -3 WITHSCORES
ZRANDMEMBER zone x
ZRANDMEMBER zone 1 WITHSCORE
ZRANDMEMBER zone 1 WITHSCORES x
ZRANDMEMBER zone -9223372036854775808
ZRANDMEMBER zone 9223372036854775807 WITHSCORES
ZRANDMEMBER zone -4611686018427387904 WITHSCORES
ZRANDMEMBER nokey x
ZRANDMEMBER str
ZRANDMEMBER str 2
ZRANDMEMBER
ZDIFF 2 za zb WITHSCORES
ZDIFF 2 zb za
ZDIFF 2 za sa WITHSCORES
ZDIFF 1 za
ZDIFF 2 nokey za
ZDIFF 2 za zb WEIGHTS 1 1
ZDIFF 2 za zb AGGREGATE SUM
ZUNION 0 za
ZUNION -1 za
ZUNION abc za
ZUNION 3 za zb
ZUNION 2 za zb WEIGHTS 1
ZUNION 2 za zb WEIGHTS 1 x
ZUNION 2 za zb AGGREGATE avg
ZUNION 2 za zb AGGREGATE
ZUNION 2 za zb FOO
ZUNION 2 za str
ZUNION 2 za str WEIGHTS x y
ZINTER 0 za
ZDIFF 0 za
ZUNIONSTORE out 2 za zb
ZRANGE out 0 -1 WITHSCORES
ZUNIONSTORE out 2 za zb WITHSCORES
ZINTERSTORE out 2 za zb WEIGHTS 2 2 AGGREGATE SUM
ZRANGE out 0 -1 WITHSCORES
ZDIFFSTORE out 2 za zb
ZRANGE out 0 -1 WITHSCORES
ZINTERSTORE out 2 za nokey
EXISTS out
SET out str
ZUNIONSTORE out 1 za
TYPE out
ZUNIONSTORE za 2 za zb
ZRANGE za 0 -1 WITHSCORES
ZUNIONSTORE out 0 za
ZDIFFSTORE out 1 za WEIGHTS 1
ZADD winf 1 x
ZADD winf2 inf x
ZUNION 2 winf winf2 WEIGHTS 0 1 WITHSCORES
ZUNION 2 winf2 winf WEIGHTS 0 1 WITHSCORES
ZADD ninf -inf x
ZUNION 2 winf2 ninf WITHSCORES
ZINTER 2 winf2 ninf WITHSCORES
ZUNION 1 winf2 WEIGHTS 0 WITHSCORES
FLUSHALL
ZADD rs 1 a 2 b 3 c 4 d
ZRANGESTORE d rs 1 2
ZRANGE d 0 -1 WITHSCORES
ZRANGESTORE d rs (1 +inf BYSCORE LIMIT 0 2
ZRANGE d 0 -1 WITHSCORES
ZRANGESTORE d rs [c - BYLEX REV
ZRANGESTORE d rs 0 -1 WITHSCORES
ZRANGESTORE d nokey 0 -1
EXISTS d
ZRANGESTORE d rs 5 10
EXISTS d
ZRANGESTORE d rs
SET d str
ZRANGESTORE d rs 0 0
TYPE d
FLUSHALL
ZADD sc 1 a 2 b 3 c 1.5 d inf e
ZSCAN nokey 0
ZSCAN nokey abc
ZSCAN sc abc
ZSCAN sc 0 COUNT 0
ZSCAN sc 0 MATCH
ZSCAN sc 0 FOO x
ZSCAN sc
ZADD keep 1 a
RENAME keep kept
ZRANGE kept 0 -1 WITHSCORES
COPY kept kc
ZADD kc 2 b
ZCARD kept
ZRANGE kc 0 -1 WITHSCORES
RENAME kc kept
ZRANGE kept 0 -1 WITHSCORES
SADD aset x
RENAME aset kept
TYPE kept
ZADD kept 1 x
SMEMBERS kept
SET kept v
ZADD kept 1 x
DEL kept
ZADD kept 1 x
ZRANGE kept 0 -1 WITHSCORES
ZADD ttl 1 a 2 b
EXPIRE ttl 100
ZADD ttl 3 c
~1 TTL ttl
ZPOPMIN ttl
~1 TTL ttl
k INFO keyspace
s KEYS *
DBSIZE
FLUSHALL
DBSIZE

# Scores and range bounds as strtod reads them (a NUL ends a bound).
ZADD z 0x1p-2 a
ZADD z 0e999 b
ZADD z 1e-310 c
ZADD z 0x10p1 d
ZADD z 0X1.8 e
ZADD z 1e-400 f
ZADD z -1e-400 f
ZADD z 0x f
ZADD z 0x.8 g
ZADD z infinity h
ZADD z -Infinity i
ZADD z infin j
ZADD z nan(123) k
ZADD z 1.e5 l
ZADD z .e5 m
ZADD z 5e n
ZADD z 5e+ o
ZADD z "+.5" p
ZADD z "\x00" q
ZADD z "1\x00" r
ZRANGE z 0 -1 WITHSCORES
ZCOUNT z "\x00" 1
ZCOUNT z "1\x00x" +inf
ZCOUNT z "(\x00" +inf
ZCOUNT z " \t1" +inf
ZCOUNT z "\t" +inf
ZCOUNT z 1e400 +inf
ZCOUNT z -1e400 +inf
ZCOUNT z 0x1p-2 +inf
ZCOUNT z nan +inf
ZCOUNT z (nan +inf
ZCOUNT z inf -inf
ZCOUNT z (-inf (inf
ZCOUNT z "(" 1
ZCOUNT z "((1" 1
ZCOUNT z "-" 1
ZCOUNT z "+" 1
ZRANGEBYLEX z "-\x00" +
ZRANGEBYLEX z "+\x00" +
ZRANGEBYLEX z "[" "+"
ZUNION 1 z WEIGHTS 1e400
ZUNION 1 z WEIGHTS inf WITHSCORES
ZUNION 1 z WEIGHTS " 1"
ZUNION 1 z WEIGHTS 0x2 WITHSCORES
ZINCRBY z 1e308 a
ZINCRBY z 1e308 a
ZINCRBY z 1e308 a
ZSCORE z a
ZINCRBY z -inf a
ZADD z INCR inf a
ZADD z INCR -inf a
ZSCORE z a
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

/// Sets and sorted sets in RESP3: sets for SMEMBERS and the like, doubles
/// for scores, pairs for WITHSCORES.
const HASHES: &str = r#"
FLUSHALL
HSET h a 1 b 2
HSET h a 10 c 3
HSET h d x d y
HSET h f
HSET h f v g
HSET h
HMSET h e 5 a 1
HMSET h e
HMSET h e 5 f
HSETNX h a no
HSETNX h z 26
HSETNX h z
HSETNX h z 1 2
HSETNX newh f v
HGET h a
HGET h d
HGET h nofield
HGET nokey a
HGET h
HGET h a b
HMGET h a nofield b
HMGET nokey a b
HMGET h
HLEN h
HLEN nokey
HLEN
HEXISTS h a
HEXISTS h nofield
HEXISTS nokey a
HEXISTS h
s HKEYS h
s HVALS h
s HGETALL h
HKEYS nokey
HVALS nokey
HGETALL nokey
HKEYS
HVALS h x
HGETALL h x
HSET h long "hello world" empty ""
HSTRLEN h long
HSTRLEN h empty
HSTRLEN h nofield
HSTRLEN nokey a
HSTRLEN h
HGET h empty
HDEL h a b nofield a
HDEL h nofield
HDEL nokey a
HDEL h
HLEN h
TYPE h
OBJECT ENCODING h
HSET wide f 0123456789012345678901234567890123456789012345678901234567890123456789
OBJECT ENCODING wide
HINCRBY h n 5
HINCRBY h n -15
HINCRBY h n 0
HGET h n
HINCRBY fresh n -3
HINCRBY h long 1
HINCRBY h n x
HINCRBY h n 1.5
HINCRBY h n 9223372036854775808
HINCRBY h n ""
HINCRBY h n
HSET h big 9223372036854775800 small -9223372036854775800
HINCRBY h big 100
HINCRBY h big 7
HINCRBY h big 1
HINCRBY h small -9
HINCRBY h small -8
HINCRBY h small -1
HSET h padded " 1" plus +1 zero 01
HINCRBY h padded 1
HINCRBY h plus 1
HINCRBY h zero 1
HINCRBYFLOAT h fl 10.5
HINCRBYFLOAT h fl 0.1
HINCRBYFLOAT h fl -10.6
HINCRBYFLOAT h fl 1e3
HINCRBYFLOAT h fl 0x10
HINCRBYFLOAT h fl 5.0e3
HINCRBYFLOAT h n 2.5
HINCRBYFLOAT h long 1
HINCRBYFLOAT h fl abc
HINCRBYFLOAT h fl nan
HINCRBYFLOAT h fl inf
HINCRBYFLOAT h fl -inf
HINCRBYFLOAT h fl ""
HINCRBYFLOAT h fl "1 "
HINCRBYFLOAT h fl
HINCRBYFLOAT h padded 1
HINCRBYFLOAT h plus 1
HINCRBYFLOAT h zero 1
HGET h fl
HINCRBYFLOAT freshf f 1.25
HSET one only x
HRANDFIELD one
HRANDFIELD one 1
HRANDFIELD one 5
HRANDFIELD one -3
HRANDFIELD one 1 WITHVALUES
HRANDFIELD one -2 WITHVALUES
HRANDFIELD one 0
HRANDFIELD one 0 WITHVALUES
HRANDFIELD nokey
HRANDFIELD nokey 3
HRANDFIELD nokey -3 WITHVALUES
HRANDFIELD one x
HRANDFIELD one 1 WITHVALUE
HRANDFIELD one 1 WITHVALUES x
HRANDFIELD one -9223372036854775808
HRANDFIELD one 9223372036854775807 WITHVALUES
HRANDFIELD one -4611686018427387904 WITHVALUES
HRANDFIELD one 4611686018427387903 WITHVALUES
HRANDFIELD nokey 9223372036854775807 WITHVALUES
HRANDFIELD nokey x
HSCAN one 0
HSCAN one 0 MATCH o*
HSCAN one 0 MATCH x*
HSCAN one 0 COUNT 10
HSCAN nokey 0
HSCAN nokey 0 COUNT 0
HSCAN one 0 COUNT 0
HSCAN one 0 COUNT -1
HSCAN one 0 COUNT abc
HSCAN one 0 FOO bar
HSCAN one 0 MATCH
HSCAN one abc
HSCAN one
SET str v
SADD set a
HSET str f v
HSETNX str f v
HMSET set f v
HGET str f
HMGET set f
HGETALL str
HDEL set a
HLEN str
HEXISTS set a
HKEYS str
HVALS set
HSTRLEN str f
HINCRBY set f 1
HINCRBY str f x
HINCRBYFLOAT str f 1
HINCRBYFLOAT set f abc
HRANDFIELD str
HRANDFIELD set 0
HRANDFIELD str -1 WITHVALUES
HSCAN str 0
HSCAN set 0 COUNT 0
HSCAN set x
GET one
SADD one a
ZADD one 1 a
SCARD one
LRANGE one 0 -1
HSET gone a 1
HDEL gone a
EXISTS gone
TYPE gone
HLEN gone
DEL one h
HSET r a 1 b 2
EXPIRE r 100
HSET r c 3
HDEL r a
~1 TTL r
RENAME r r2
HLEN r2
s HGETALL r2
~1 TTL r2
COPY r2 r3
HINCRBY r3 b 10
HGET r2 b
HGET r3 b
SET r2 str
HGET r2 b
k INFO keyspace
"#;

/// The hash commands in RESP3 (after HELLO 3): HGETALL a map, HRANDFIELD
/// WITHVALUES pairs of arrays.
const HASHES_RESP3: &str = r#"
FLUSHALL
HSET h k v
HGETALL h
HGETALL nokey
HRANDFIELD h 1 WITHVALUES
HRANDFIELD h -2 WITHVALUES
HRANDFIELD h 2 WITHVALUES
HRANDFIELD h -2
HRANDFIELD nokey 2 WITHVALUES
HRANDFIELD nokey
HMGET h k nofield
HGET h nofield
HSCAN h 0
HINCRBYFLOAT h f 1.5
HKEYS nokey
"#;

const SETS_RESP3: &str = r#"
FLUSHALL
SADD s a b c
s SMEMBERS s
SMEMBERS nokey
s SINTER s
s SUNION s nokey
SDIFF nokey
SINTER nokey s
SMISMEMBER s a zz
SPOP nokey
SPOP nokey 2
SPOP s 0
s SPOP s 5
SADD s a b c
s SRANDMEMBER s 5
SRANDMEMBER nokey 3
SRANDMEMBER nokey
SSCAN nokey 0
ZADD z 1 a 2.5 b 3 c
ZRANGE z 0 -1 WITHSCORES
ZRANGE z 0 -1
ZRANGEBYSCORE z -inf inf WITHSCORES
ZREVRANGE z 0 -1 WITHSCORES
ZSCORE z b
ZSCORE z nomember
ZMSCORE z a nomember
ZINCRBY z 1 a
ZADD z INCR 1 a
ZADD z NX INCR 1 a
ZPOPMIN z
ZPOPMIN z 1
ZPOPMAX z 5
ZPOPMIN nokey
ZPOPMIN nokey 1
ZADD z 1 a 2 b
ZUNION 1 z WITHSCORES
ZINTER 1 z WITHSCORES
ZDIFF 1 z WITHSCORES
ZUNION 1 z
ZRANGE nokey 0 -1 WITHSCORES
ZRANK z a
ZRANK z nomember
"#;

/// The list commands: every reply shape and error text, in Redis's order
/// of checks (a bad argument against a missing key or a key of another
/// type), negative indexes, counts, the blocking forms where they do not
/// wait (an element there, a short timeout, inside MULTI), what WATCH sees
/// of commands that change nothing, and the time to live a list keeps.
const LISTS: &str = r#"
FLUSHALL
SET s str
RPUSH l a b c d e
LPOP l
RPOP l
LPOP l 2
RPOP l 0
LPOP l 0
LRANGE l 0 -1
RPOP l 5
EXISTS l
LPOP l
LPOP l 2
RPOP nokey
RPOP nokey 0
LPOP nokey 3
LPOP l -1
LPOP l abc
LPOP l 1.5
LPOP nokey -1
LPOP s -1
LPOP l 1 2
LPOP
RPOP
LPOP s
LPOP s 0
RPOP s 2
RPUSH l x
LPOP l 1
TYPE l
RPUSH l a b c
RPOP l 9223372036854775807
RPUSH l 1 2 3 12345678901234567890 -5 ""
LPOP l 10
RPUSH l a b c
LINDEX l 0
LINDEX l 2
LINDEX l 3
LINDEX l -1
LINDEX l -3
LINDEX l -4
LINDEX l abc
LINDEX l 1.5
LINDEX l 9223372036854775807
LINDEX l -9223372036854775808
LINDEX l 9223372036854775808
LINDEX nokey 0
LINDEX nokey abc
LINDEX s 0
LINDEX s abc
LINDEX l
LINDEX l 0 1
LSET l 0 A
LSET l -1 C
LRANGE l 0 -1
LSET l 3 x
LSET l -4 x
LSET l abc x
LSET nokey 0 x
LSET nokey abc x
EXISTS nokey
LSET s 0 x
LSET s abc x
LSET l 0
LINSERT l BEFORE b X
LINSERT l after b Y
LINSERT l before A first
LINSERT l AFTER C last
LRANGE l 0 -1
LINSERT l before nopivot x
LINSERT nokey before a x
EXISTS nokey
LINSERT l middle b x
LINSERT nokey middle b x
LINSERT s before a x
LINSERT s middle a x
LINSERT l before b
DEL l
RPUSH l a b a c a d a
LREM l 2 a
LRANGE l 0 -1
LREM l -1 a
LRANGE l 0 -1
LREM l 0 a
LRANGE l 0 -1
LREM l 0 zz
LREM l x a
LREM nokey 1 a
LREM nokey x a
LREM s 1 a
LREM s x a
LREM l 0 b
LREM l 0 c
LREM l 0 d
EXISTS l
RPUSH l a a b a
LREM l -9223372036854775808 a
LREM l 9223372036854775807 b
EXISTS l
LREM l 1
RPUSH l a b c d e
LTRIM l 1 -2
LRANGE l 0 -1
LTRIM l 0 -1
LTRIM l -100 100
LRANGE l 0 -1
LTRIM l 2 1
EXISTS l
RPUSH l a b c
LTRIM l 5 10
EXISTS l
LTRIM nokey 0 1
LTRIM l x 1
LTRIM l 0 x
LTRIM nokey x 1
LTRIM s 0 1
LTRIM s x 1
RPUSH l a b c d
LTRIM l -2 -1
LRANGE l 0 -1
LTRIM l -9223372036854775808 9223372036854775807
LRANGE l 0 -1
LTRIM l 0
DEL l
RPUSH l a b c a b c a
LPOS l a
LPOS l c
LPOS l zz
LPOS l a RANK 2
LPOS l a RANK -1
LPOS l a RANK -2
LPOS l a RANK 4
LPOS l a RANK -4
LPOS l a COUNT 0
LPOS l a COUNT 2
LPOS l a COUNT 2 RANK 2
LPOS l a RANK -1 COUNT 0
LPOS l a COUNT 0 MAXLEN 4
LPOS l a RANK -1 COUNT 0 MAXLEN 1
LPOS l a RANK 2 MAXLEN 3
LPOS l a MAXLEN 0
LPOS l a rank 1 rank 3
LPOS l zz COUNT 1
LPOS l a RANK 0
LPOS l a RANK x
LPOS l a COUNT -1
LPOS l a COUNT x
LPOS l a MAXLEN -1
LPOS l a MAXLEN x
LPOS l a RANK
LPOS l a FOO 1
LPOS l a RANK 0 COUNT -1
LPOS l a COUNT -1 RANK 0
LPOS l a RANK -9223372036854775808
LPOS l a RANK -9223372036854775808 COUNT 1
LPOS l a RANK 9223372036854775807 COUNT 0
LPOS nokey a
LPOS nokey a COUNT 0
LPOS nokey a RANK 0
LPOS s a
LPOS s a COUNT 1
LPOS s a RANK 0
LPOS l
LPUSHX nokey a
RPUSHX nokey a b
EXISTS nokey
LPUSHX l x y
RPUSHX l z
LRANGE l 0 -1
LPUSHX s a
RPUSHX s a
LPUSHX l
DEL l m
RPUSH l a b c
LMOVE l m LEFT RIGHT
LMOVE l m RIGHT LEFT
LRANGE l 0 -1
LRANGE m 0 -1
LMOVE l m left left
EXISTS l
LMOVE l m left left
LMOVE m m LEFT RIGHT
LRANGE m 0 -1
LMOVE m m RIGHT RIGHT
LRANGE m 0 -1
LMOVE nokey m left left
LMOVE nokey s left left
LMOVE s m left left
LMOVE m s left left
LRANGE m 0 -1
LMOVE m m up left
LMOVE m n left down
LMOVE nokey n up left
LMOVE m n left
RPOPLPUSH m n
RPOPLPUSH m n
LRANGE n 0 -1
RPOPLPUSH nokey n
RPOPLPUSH n s
RPOPLPUSH s n
RPOPLPUSH n n
LRANGE n 0 -1
RPUSH one x
RPOPLPUSH one one
LRANGE one 0 -1
RPOPLPUSH n
DEL l m n
RPUSH m a b c d
LMPOP 2 l m LEFT
LMPOP 2 l m RIGHT COUNT 2
LMPOP 1 m left COUNT 10
EXISTS m
LMPOP 2 l m left
LMPOP 1 nokey right count 3
LMPOP 2 s m left
RPUSH m a
LMPOP 2 m s left
LMPOP 0 l left
LMPOP -1 l left
LMPOP x l left
LMPOP 3 l m left
LMPOP 1 l up
LMPOP 1 l left count 0
LMPOP 1 l left count -1
LMPOP 1 l left count x
LMPOP 1 l left count 1 count 2
LMPOP 1 l left count
LMPOP 1 l left foo 1
LMPOP 0 l up count 0
LMPOP 1 l
LMPOP 2 l m
DEL l m
RPUSH l a b c d e f
BLPOP l 0
BRPOP nokey l 0
BLPOP nokey 0.01
BRPOP nokey1 nokey2 0.02
BLPOP s 0
BLPOP nokey s 0.01
BLPOP l s 0
BLPOP l x
BLPOP l -1
BLPOP l -0.001
BLPOP l -0.002
BLPOP l -0.0011
BLPOP l 1e-400
BLPOP l ""
BLPOP l " 1"
BLPOP l "1 "
BLPOP l inf
BLPOP l 1e16
BLPOP l nan
BLPOP nokey x
BLPOP s x
BLPOP l
BRPOP l
BLMOVE l m left right 0
BLMOVE l m right left 0.5
LRANGE m 0 -1
EXISTS l
RPUSH l g h i j
BLMOVE nokey m left right 0.01
BLMOVE l m up right x
BLMOVE l m left down x
BLMOVE l m left right x
BLMOVE l m left right -1
BLMOVE s m left right 0
BLMOVE l s left right 0
BLMOVE l m left right
BRPOPLPUSH l m 0
BRPOPLPUSH nokey m 0.01
BRPOPLPUSH l m x
BRPOPLPUSH l s 0
BRPOPLPUSH l m
RPUSH l a b c
BLMPOP 0 2 nokey l left count 2
BLMPOP 0 2 nokey l right count 5
BLMPOP 0.01 1 nokey left
BLMPOP x 1 l left
BLMPOP x 0 l left
BLMPOP x 1 l up
BLMPOP x 1 l left count 0
BLMPOP 0.01 2 s l left
BLMPOP -1 1 l left
BLMPOP 0 1 l
LRANGE m 0 -1
MULTI
BLPOP nokey 0
BRPOP nokey nokey2 0
BRPOPLPUSH nokey m 0
BLMOVE nokey m left left 0
BLMPOP 0 1 nokey left
RPUSH q x y
BLPOP q 0
BLMPOP 0 1 q right count 3
EXEC
MULTI
LPOP nokey
LPOP nokey 1
LMOVE nokey m left left
LMPOP 1 nokey left
LPOS nokey x
LINDEX nokey 0
LSET nokey 0 x
EXEC
EVAL "return redis.call('blmpop', 0, 1, KEYS[1], 'left')" 1 nokey
RPUSH q z
EVAL "return redis.call('blmpop', 0, 1, KEYS[1], 'left')" 1 q
EVAL "return redis.call('lmpop', 1, KEYS[1], 'left')" 1 nokey
RPUSH q a b c
EVAL "return redis.call('lpop', KEYS[1], 2)" 1 q
EVAL "return redis.call('lpos', KEYS[1], 'c', 'COUNT', 0)" 1 q
EVAL "return redis.call('lmove', KEYS[1], KEYS[2], 'left', 'right')" 2 q r
COMMAND GETKEYS LMOVE a b left right
COMMAND GETKEYS RPOPLPUSH a b
COMMAND GETKEYS LMPOP 2 a b left
COMMAND GETKEYS LMPOP 2 a left
COMMAND GETKEYS BLMPOP 0 2 a b left
COMMAND GETKEYS BLPOP a b 0
COMMAND GETKEYS BRPOPLPUSH a b 0
COMMAND GETKEYS BLMOVE a b left left 0
COMMAND GETKEYS LPOS k e
DEL w
RPUSH w a b
WATCH w
LREM w 0 zz
LINSERT w before zz x
LPUSHX nokey a
LPOS w a
LINDEX w 0
LPOP w 0
RPOPLPUSH nokey w
LMOVE nokey w left left
LMPOP 1 nokey left
LSET nokey 0 x
LTRIM nokey 0 1
MULTI
LLEN w
EXEC
WATCH w
LSET w 0 a
MULTI
LLEN w
EXEC
WATCH w
LMOVE w w left left
MULTI
LLEN w
EXEC
WATCH w
LREM w 1 b
MULTI
LLEN w
EXEC
EXISTS w
DEL t u
RPUSH t a b c d
EXPIRE t 1000
LPOP t
~1 TTL t
LSET t 0 z
~1 TTL t
LINSERT t before z y
~1 TTL t
LREM t 1 y
~1 TTL t
LTRIM t 0 1
~1 TTL t
RPUSH u q
EXPIRE u 500
LMOVE u t left right
~1 TTL t
EXISTS u
RPUSH u q r
EXPIRE u 500
LMOVE t u left right
~1 TTL t
~1 TTL u
LPUSHX t w
~1 TTL t
RPOPLPUSH t t
~1 TTL t
LMPOP 1 t left count 1
~1 TTL t
k INFO keyspace
"#;

/// The list commands' replies in RESP3: nil and the nil array as `_`.
const LISTS_RESP3: &str = r#"
FLUSHALL
RPUSH l a b c
LPOP nokey
LPOP nokey 2
LPOP l 0
LPOP l 2
RPOP l
LINDEX l 5
LINDEX nokey 0
LPOS l zz
LPOS nokey a COUNT 1
LPOS nokey a
LMPOP 1 nokey left
LMOVE nokey l left left
RPOPLPUSH nokey l
BLPOP nokey 0.01
BRPOP nokey 0.01
BLMOVE nokey l left left 0.01
BRPOPLPUSH nokey l 0.01
BLMPOP 0.01 1 nokey left
RPUSH l x y
BLPOP l 0
LMPOP 1 l right count 5
MULTI
BLPOP nokey 0
BRPOPLPUSH nokey l 0
BLMPOP 0 1 nokey left
EXEC
ZADD z 1 a 2.5 b 3 c
BZPOPMIN z 0
BZPOPMAX nokey z 0
BZPOPMIN nokey 0.01
BZMPOP 0 1 z MAX COUNT 5
BZMPOP 0.01 1 z MIN
MULTI
BZPOPMIN nokey 0
BZMPOP 0 1 nokey MIN
EXEC
"#;

/// FUNCTION LOAD's registration errors (redis.register_function's
/// arguments, positional and named), as Redis 7.0's function_lua.c words
/// them. None of these loads succeeds, so no library is left behind.
const FUNCTION_REGISTRATION: &str = r##"
FUNCTION LIST bad_argument
FUNCTION LIST libraryname
FUNCTION LIST withcode withcode
FUNCTION LIST libraryname a libraryname b
FUNCTION LIST WITHCODE LIBRARYNAME
FUNCTION LOAD x y z
FUNCTION LOAD foo bar
FUNCTION LOAD replace
FUNCTION LOAD
FUNCTION FLUSH bad
FUNCTION FLUSH sync async
FUNCTION KILL
FUNCTION KILL x
FUNCTION STATS x
FUNCTION DUMP x
FUNCTION RESTORE
FUNCTION DELETE
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function()"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function('f1')"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function('f1', function() return 1 end, {}, 'x')"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function({}, function() return 1 end)"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function('f1', 3)"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function{function_name='f1', callback=function() return 1 end, flags={'bad'}}"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function{function_name='f1', callback=function() return 1 end, foo=1}"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function{callback=function() return 1 end}"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function{function_name='f1'}"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function('f1', function() return 1 end) redis.register_function('f1', function() return 1 end)"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function('f-1', function() return 1 end)"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function{function_name='f1', callback=function() return 1 end, flags='x'}"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function{function_name={}, callback=function() return 1 end}"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function{function_name='f1', callback=1}"
FUNCTION LOAD "#!lua name=regtest\x0aredis.register_function{function_name='f1', callback=function() return 1 end, description={}}"
"##;

/// The blocking sorted-set pops (RESP2): with members there, timeouts,
/// MULTI, their errors and order of checks.
const BLOCKING_ZSETS: &str = r#"
FLUSHALL
ZADD z 1 a 2 b 3 c 4 d
ZADD y 5 e
SET s v
BZPOPMIN z 0
BZPOPMAX z 0
BZPOPMIN nokey y 0
BZPOPMIN nokey 0.01
BZPOPMAX nokey other 0.02
BZPOPMIN s 0
BZPOPMIN nokey s 0.01
BZPOPMIN z s 0
BZPOPMIN z x
BZPOPMIN z -1
BZPOPMIN z
BZPOPMIN
BZMPOP 0 1 z MIN
ZADD z 7 f 8 g 9 h
BZMPOP 0 2 nokey z MAX COUNT 2
BZMPOP 0 2 nokey z MAX COUNT 10
BZMPOP 0.01 1 z MIN
BZMPOP 0.01 1 nokey MAX
BZMPOP 0 1 s MIN
BZMPOP x 1 z MIN
BZMPOP -1 1 z MIN
BZMPOP 0 0 z MIN
BZMPOP 0 2 z MIN
BZMPOP 0 1 z FOO
BZMPOP 0 1 z MIN COUNT 0
BZMPOP 0 1 z MIN COUNT 1 COUNT 2
BZMPOP 0 1 z
ZADD z 1 a
MULTI
BZPOPMIN nokey 0
BZPOPMAX z 0
BZMPOP 0 1 nokey MIN
EXEC
EXISTS z
COMMAND GETKEYS BZPOPMIN a b 0
COMMAND GETKEYS BZMPOP 0 2 a b MIN
"#;

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
    scan_elements(raw, &["SCAN"], options, false).await
}

/// Every element `command` (SCAN, or HSCAN/SSCAN/ZSCAN and a key) returns
/// to cursor 0 with these options, sorted, each once; with `pairs`, each
/// member joined to its score or field to its value (ZSCAN, HSCAN).
async fn scan_elements(
    raw: &mut Raw,
    command: &[&str],
    options: &[&str],
    pairs: bool,
) -> Vec<Vec<u8>> {
    let mut cursor = b"0".to_vec();
    let mut keys = Vec::new();
    for _ in 0..100_000 {
        let mut args: Vec<Vec<u8>> = command.iter().map(|c| c.as_bytes().to_vec()).collect();
        args.push(cursor.clone());
        args.extend(options.iter().map(|o| o.as_bytes().to_vec()));
        match frame_of(&raw.call_bytes(&args).await) {
            Frame::Array(parts) => match parts.as_slice() {
                [Frame::Bulk(next), Frame::Array(batch)] => {
                    let mut elements = Vec::new();
                    for key in batch {
                        match key {
                            Frame::Bulk(key) => elements.push(key.clone()),
                            other => panic!("SCAN key {other:?}"),
                        }
                    }
                    if pairs {
                        for pair in elements.chunks(2) {
                            keys.push([pair[0].as_slice(), b"=", &pair[1]].concat());
                        }
                    } else {
                        keys.extend(elements);
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
    panic!("{command:?} {options:?} did not finish");
}

/// A keyspace of several types, some keys expired: a full SCAN with each
/// set of options returns the same keys from both servers.
async fn compare_scans(redis: &mut Raw, roost: &mut Raw, differences: &mut Vec<String>) {
    let mut table = String::from("FLUSHALL\n");
    for i in 0..320 {
        table.push_str(&match i % 8 {
            0 => format!("SET str:{i} v\n"),
            1 => format!("RPUSH list:{i} a\n"),
            2 => format!("HSET hash:{i} f v\n"),
            3 => format!("SET gone:{i} v PX 1\n"),
            4 => format!("SADD set:{i} a b\n"),
            5 => format!("ZADD zset:{i} 1 a 2 b\n"),
            6 => format!("SADD goneset:{i} a b c\nPEXPIRE goneset:{i} 1\nZADD gonezset:{i} 1 a\nPEXPIRE gonezset:{i} 1\n"),
            _ => format!("SET ttl:{i} v EX 1000\n"),
        });
    }
    compare(&table, redis, roost, differences).await;
    // Let the PX 1 keys expire.
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Expired sets and sorted sets are gone, and what is written under
    // their names starts empty (their members do not come back).
    let expired = r#"
TYPE goneset:6
SCARD goneset:6
SMEMBERS goneset:6
SADD goneset:6 x
SMEMBERS goneset:6
ZCARD gonezset:6
ZADD gonezset:6 5 z
ZRANGE gonezset:6 0 -1 WITHSCORES
EXISTS goneset:14 gonezset:14
SET goneset:14 v
GET goneset:14
DEL goneset:14
"#;
    compare(expired, redis, roost, differences).await;
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
        &["TYPE", "set", "COUNT", "5"],
        &["TYPE", "SET", "MATCH", "goneset:*"],
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

/// A large hash, set and sorted set (Redis's hash-table and skiplist
/// encodings) and small ones: whole HSCANs, SSCANs and ZSCANs with each set
/// of options return the same fields and values, members (and scores) from
/// both servers.
async fn compare_member_scans(redis: &mut Raw, roost: &mut Raw, differences: &mut Vec<String>) {
    let mut table = String::from("FLUSHALL\n");
    let mut sadd = String::from("SADD big");
    let mut zadd = String::from("ZADD zbig");
    let mut hset = String::from("HSET hbig");
    for i in 0..600 {
        sadd.push_str(&format!(" m:{i}"));
        zadd.push_str(&format!(" {}.5 m:{i}", i % 37));
        hset.push_str(&format!(" m:{i} v:{}", i % 41));
    }
    table.push_str(&format!(
        "{sadd}\n{zadd}\n{hset}\nSADD small a b c\nZADD zsmall 1 a 2 b\nHSET hsmall a 1 b 2\n"
    ));
    compare(&table, redis, roost, differences).await;
    for (command, pairs) in [
        (&["SSCAN", "big"][..], false),
        (&["ZSCAN", "zbig"], true),
        (&["SSCAN", "small"], false),
        (&["ZSCAN", "zsmall"], true),
        (&["HSCAN", "hbig"], true),
        (&["HSCAN", "hsmall"], true),
    ] {
        for options in [
            &[][..],
            &["COUNT", "1"],
            &["COUNT", "7"],
            &["COUNT", "1000"],
            &["MATCH", "m:1*"],
            &["MATCH", "*5", "COUNT", "3"],
            &["MATCH", "nomatch*"],
        ] {
            let (a, b) = (
                scan_elements(redis, command, options, pairs).await,
                scan_elements(roost, command, options, pairs).await,
            );
            if a != b {
                differences.push(format!(
                    "{command:?} to the end with {options:?}: redis {} elements, roost {}",
                    a.len(),
                    b.len()
                ));
            }
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
    for table in [KEYS, EXPIRY, STRINGS, SERVER, HASHES, SETS, ZSETS] {
        compare(table, &mut theirs, &mut ours, &mut differences).await;
    }
    compare_globs(&mut theirs, &mut ours, &mut differences).await;
    compare_scans(&mut theirs, &mut ours, &mut differences).await;
    compare_member_scans(&mut theirs, &mut ours, &mut differences).await;
    let hello = ["HELLO", "3"].map(|a| a.as_bytes().to_vec());
    let (a, b) = (
        theirs.call_bytes(&hello).await,
        ours.call_bytes(&hello).await,
    );
    assert_eq!((a[0], b[0]), (b'%', b'%'), "HELLO 3 answers a map");
    compare(RESP3, &mut theirs, &mut ours, &mut differences).await;
    compare(SETS_RESP3, &mut theirs, &mut ours, &mut differences).await;
    compare(HASHES_RESP3, &mut theirs, &mut ours, &mut differences).await;
    assert!(
        differences.is_empty(),
        "{} replies differ from redis-server's:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

/// The list commands (`lists.rs`) against redis-server, byte for byte:
/// the [`LISTS`] table in RESP2, then [`LISTS_RESP3`] after HELLO 3; and
/// a blocking pop that waits until another client pushes, on each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_replies_match_a_real_redis_server() {
    let redis = spawn_redis().await;
    let roost = start(config());
    let mut theirs = Raw::connect(redis.addr).await;
    let mut ours = Raw::connect(roost.addr()).await;
    let mut differences = Vec::new();
    compare(LISTS, &mut theirs, &mut ours, &mut differences).await;
    compare(BLOCKING_ZSETS, &mut theirs, &mut ours, &mut differences).await;
    compare(
        FUNCTION_REGISTRATION,
        &mut theirs,
        &mut ours,
        &mut differences,
    )
    .await;
    // INFO's blocked_clients counts a client while it waits, on each.
    for addr in [redis.addr, roost.addr()] {
        let mut blocked = Raw::connect(addr).await;
        let mut watcher = Raw::connect(addr).await;
        let wait = ["BZPOPMIN", "zwake", "5"].map(|a| a.as_bytes().to_vec());
        let watch = async {
            let deadline = Instant::now() + Duration::from_secs(3);
            loop {
                let info = watcher.call(&["INFO", "clients"]).await;
                let text = match info {
                    Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => format!("{other:?}"),
                };
                if text.contains("blocked_clients:1") {
                    break;
                }
                assert!(Instant::now() < deadline, "{addr}: never blocked: {text}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            watcher.call(&["ZADD", "zwake", "2", "m"]).await
        };
        let (reply, added) = tokio::join!(blocked.call_bytes(&wait), watch);
        assert_eq!(added, Frame::Integer(1), "{addr}");
        assert_eq!(
            reply, b"*3\r\n$5\r\nzwake\r\n$1\r\nm\r\n$1\r\n2\r\n",
            "{addr}"
        );
        let info = watcher.call(&["INFO", "clients"]).await;
        assert!(
            matches!(&info, Frame::Bulk(b) if String::from_utf8_lossy(b).contains("blocked_clients:0")),
            "{addr}: {info:?}"
        );
    }
    // A pop that waits: each server's client blocks, another pushes 150 ms
    // later; the same reply, after the push, on each.
    for addr in [redis.addr, roost.addr()] {
        let mut blocked = Raw::connect(addr).await;
        let mut pusher = Raw::connect(addr).await;
        let started = Instant::now();
        let wait = ["BLPOP", "wake", "nokey", "5"].map(|a| a.as_bytes().to_vec());
        let push = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            pusher.call(&["RPUSH", "wake", "x", "y"]).await
        };
        let (reply, pushed) = tokio::join!(blocked.call_bytes(&wait), push);
        assert_eq!(pushed, Frame::Integer(2), "{addr}");
        assert_eq!(reply, b"*2\r\n$4\r\nwake\r\n$1\r\nx\r\n", "{addr}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(140) && waited < Duration::from_secs(4),
            "{addr}: waited {waited:?}"
        );
        assert_eq!(
            blocked.call(&["LRANGE", "wake", "0", "-1"]).await,
            Frame::Array(vec![Frame::bulk("y")]),
            "{addr}"
        );
    }
    let hello = ["HELLO", "3"].map(|a| a.as_bytes().to_vec());
    let (a, b) = (
        theirs.call_bytes(&hello).await,
        ours.call_bytes(&hello).await,
    );
    assert_eq!((a[0], b[0]), (b'%', b'%'), "HELLO 3 answers a map");
    compare(LISTS_RESP3, &mut theirs, &mut ours, &mut differences).await;
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

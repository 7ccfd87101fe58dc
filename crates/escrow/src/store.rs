//! How a site keeps its counters in its Redis, and the two conditional
//! writes the designs use.
//!
//! Keys (at each site's own Redis):
//!
//! | key | type | what |
//! | --- | --- | --- |
//! | `escrow:bc:{key}` | hash | `state`: this site's replica (JSON, [`StoredCounter`]); `token`: who wrote it last (`{writer}-{seq}`) |
//! | `escrow:keys` | set | every counter this site knows |
//! | `escrow:dirty` | set | counters written by client libraries since the site agent last shipped them (client-based design) |
//!
//! Every write replaces `state` and `token` together and is conditional:
//! WATCH/MULTI/EXEC around a read ([`watch_update`], the client-based
//! design), or a Lua compare-and-set on the token ([`cas_write`], the
//! server-based node, which caches the state and so does not read before
//! writing). Both check the same token, so the two can share a store.

use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};
use roost_bcounter::ReplicaId;
use serde::{Deserialize, Serialize};

use crate::error::EscrowError;
use crate::logic::Counter;

/// The set of counters a site knows.
pub const KEYS_SET: &str = "escrow:keys";
/// Counters client libraries changed since the agent shipped them.
pub const DIRTY_SET: &str = "escrow:dirty";
/// Version of [`StoredCounter`].
pub const STORE_VERSION: u32 = 1;

/// How many conflicting conditional writes an update tolerates before it
/// reports [`EscrowError::Contention`].
pub const MAX_CAS_ATTEMPTS: u32 = 10_000;

/// The Redis key of counter `key`'s replica.
pub fn counter_key(key: &str) -> String {
    format!("escrow:bc:{key}")
}

#[derive(Serialize)]
struct StoredOut<'a> {
    version: u32,
    counter: &'a Counter,
}

/// The JSON held in `state`.
#[derive(Deserialize)]
pub struct StoredCounter {
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    counter: Option<serde_json::Value>,
}

/// Encodes a replica for `state`.
pub fn encode_state(key: &str, counter: &Counter) -> Result<String, EscrowError> {
    serde_json::to_string(&StoredOut {
        version: STORE_VERSION,
        counter,
    })
    .map_err(|e| EscrowError::counter(key, format!("cannot encode: {e}")))
}

/// Decodes `state`, checking that it is this site's replica of a counter of
/// `sites` sites.
pub fn decode_state(
    key: &str,
    bytes: &[u8],
    me: ReplicaId,
    sites: usize,
) -> Result<Counter, EscrowError> {
    let corrupt = |reason: String| EscrowError::CorruptState {
        key: key.to_owned(),
        reason,
    };
    let stored: StoredCounter =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    match stored.version {
        Some(STORE_VERSION) => {}
        Some(found) => {
            return Err(corrupt(format!(
                "unsupported version {found}, this build reads {STORE_VERSION}"
            )))
        }
        None => return Err(corrupt("missing `version`".to_owned())),
    }
    let counter = stored
        .counter
        .ok_or_else(|| corrupt("missing `counter`".to_owned()))?;
    let counter: Counter = serde_json::from_value(counter).map_err(|e| corrupt(e.to_string()))?;
    if counter.me() != me {
        return Err(corrupt(format!(
            "it is replica {}'s state, this site is replica {me}",
            counter.me()
        )));
    }
    if counter.replica_count() != sites {
        return Err(corrupt(format!(
            "it knows {} sites, this deployment has {sites}",
            counter.replica_count()
        )));
    }
    Ok(counter)
}

/// Tokens that identify one write of one writer: `{writer:016x}-{seq}`.
#[derive(Debug)]
pub struct Tokens {
    writer: u64,
    seq: AtomicU64,
}

impl Tokens {
    pub fn new() -> Tokens {
        Tokens {
            writer: rand::random(),
            seq: AtomicU64::new(0),
        }
    }

    pub fn next(&self) -> String {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{:016x}-{seq}", self.writer)
    }
}

impl Default for Tokens {
    fn default() -> Self {
        Tokens::new()
    }
}

/// Opens a connection to a site's Redis (`redis://host:port/`). Each
/// connection is one TCP connection; WATCH needs one per concurrent user.
pub async fn connect(url: &str) -> Result<MultiplexedConnection, EscrowError> {
    let client = Client::open(url).map_err(|e| EscrowError::redis(&e))?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(2)))
        .set_response_timeout(Some(std::time::Duration::from_secs(10)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| EscrowError::redis(&e))
}

/// Zeroes the Redis server's per-command statistics (`CONFIG RESETSTAT`),
/// so that [`command_calls`] counts from now.
pub async fn reset_command_stats(url: &str) -> Result<(), EscrowError> {
    let mut con = connect(url).await?;
    Ok(redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut con)
        .await?)
}

/// Calls of each command the Redis server ran since its statistics were
/// reset (`INFO commandstats`: lowercase names, `config|resetstat` style
/// for subcommands; commands a Lua script called are counted too, under
/// their own names). The `info` and `config` calls that measure are left
/// out.
pub async fn command_calls(
    url: &str,
) -> Result<std::collections::BTreeMap<String, u64>, EscrowError> {
    let mut con = connect(url).await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut con)
        .await?;
    Ok(parse_command_calls(&info))
}

fn parse_command_calls(info: &str) -> std::collections::BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))?
                .parse()
                .ok()?;
            let measuring = name == "info" || name.starts_with("config");
            (!measuring).then(|| (name.to_owned(), calls))
        })
        .collect()
}

/// A Redis connection opened on first use and dropped after an error, so the
/// next use reconnects (one connect at a time).
#[derive(Debug)]
pub struct LazyConnection {
    url: String,
    slot: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

impl LazyConnection {
    pub fn new(url: &str, con: Option<MultiplexedConnection>) -> LazyConnection {
        LazyConnection {
            url: url.to_owned(),
            slot: tokio::sync::Mutex::new(con),
        }
    }

    /// The connection, opening it if there is none.
    pub async fn get(&self) -> Result<MultiplexedConnection, EscrowError> {
        let mut slot = self.slot.lock().await;
        if let Some(con) = slot.as_ref() {
            return Ok(con.clone());
        }
        let con = connect(&self.url).await?;
        *slot = Some(con.clone());
        Ok(con)
    }

    /// Drops the connection (after an error on it).
    pub async fn invalidate(&self) {
        *self.slot.lock().await = None;
    }

    /// `result`, dropping the connection if it is an error (for an owner
    /// with exclusive access, which needs no lock).
    pub fn failed<T>(&mut self, result: Result<T, redis::RedisError>) -> Result<T, EscrowError> {
        result.map_err(|error| {
            *self.slot.get_mut() = None;
            EscrowError::from(error)
        })
    }
}

/// A stored replica and the token of the write that stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub counter: Counter,
    pub token: String,
}

fn record_of(
    key: &str,
    state: Option<Vec<u8>>,
    token: Option<String>,
    me: ReplicaId,
    sites: usize,
) -> Result<Option<Record>, EscrowError> {
    match (state, token) {
        (None, None) => Ok(None),
        (Some(state), Some(token)) => Ok(Some(Record {
            counter: decode_state(key, &state, me, sites)?,
            token,
        })),
        _ => Err(EscrowError::CorruptState {
            key: key.to_owned(),
            reason: "the hash has one of `state` and `token` but not the other".to_owned(),
        }),
    }
}

/// Reads a replica (`None` if this site does not have the counter).
pub async fn load(
    con: &mut MultiplexedConnection,
    key: &str,
    me: ReplicaId,
    sites: usize,
) -> Result<Option<Record>, EscrowError> {
    let (state, token): (Option<Vec<u8>>, Option<String>) = redis::cmd("HMGET")
        .arg(counter_key(key))
        .arg("state")
        .arg("token")
        .query_async(con)
        .await?;
    record_of(key, state, token, me, sites)
}

/// What an update decided after seeing the current replica.
pub enum Decision<R> {
    /// Write this replica back, then answer `R`.
    Write(Counter, R),
    /// Leave the store alone and answer `R`.
    Keep(R),
}

/// Who writes in [`watch_update`], and how.
pub struct Writer<'a> {
    pub tokens: &'a Tokens,
    /// This site's replica id and the number of sites.
    pub me: ReplicaId,
    pub sites: usize,
    /// Add the counter to [`DIRTY_SET`] in the same transaction (client
    /// libraries do, so that the site agent ships their writes).
    pub mark_dirty: bool,
    /// Counts the writes that lost to another writer and were retried.
    pub conflicts: &'a AtomicU64,
}

/// A read-modify-write under WATCH/MULTI/EXEC, retried while another writer
/// gets in between. `decide` sees the current replica (`None`: no such
/// counter here) and may run several times. Returns its answer and the
/// replica as written (or as read, when nothing was written).
///
/// `con` must not be shared with anything else while this runs: WATCH is
/// per connection.
pub async fn watch_update<R>(
    con: &mut MultiplexedConnection,
    writer: &Writer<'_>,
    key: &str,
    mut decide: impl FnMut(Option<Counter>) -> Result<Decision<R>, EscrowError>,
) -> Result<(R, Option<Counter>), EscrowError> {
    let Writer {
        tokens,
        me,
        sites,
        mark_dirty,
        conflicts,
    } = *writer;
    let redis_key = counter_key(key);
    for _ in 0..MAX_CAS_ATTEMPTS {
        redis::cmd("WATCH")
            .arg(&redis_key)
            .exec_async(&mut *con)
            .await?;
        let current = match load(con, key, me, sites).await {
            Ok(current) => current.map(|record| record.counter),
            Err(error) => {
                let _ = redis::cmd("UNWATCH").exec_async(&mut *con).await;
                return Err(error);
            }
        };
        let decision = match decide(current.clone()) {
            Ok(decision) => decision,
            Err(error) => {
                let _ = redis::cmd("UNWATCH").exec_async(&mut *con).await;
                return Err(error);
            }
        };
        let (counter, answer) = match decision {
            Decision::Keep(answer) => {
                redis::cmd("UNWATCH").exec_async(&mut *con).await?;
                return Ok((answer, current));
            }
            Decision::Write(counter, answer) => (counter, answer),
        };
        let state = encode_state(key, &counter)?;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HSET")
            .arg(&redis_key)
            .arg("state")
            .arg(&state)
            .arg("token")
            .arg(tokens.next())
            .ignore()
            .cmd("SADD")
            .arg(KEYS_SET)
            .arg(key)
            .ignore();
        if mark_dirty {
            pipe.cmd("SADD").arg(DIRTY_SET).arg(key).ignore();
        }
        let result: Value = pipe.query_async(&mut *con).await?;
        if result != Value::Nil {
            return Ok((answer, Some(counter)));
        }
        // Another writer changed the replica after WATCH: read it again.
        conflicts.fetch_add(1, Ordering::Relaxed);
    }
    Err(EscrowError::Contention {
        key: key.to_owned(),
        attempts: MAX_CAS_ATTEMPTS,
    })
}

const CAS_SCRIPT: &str = r"
local current = redis.call('HGET', KEYS[1], 'token')
if current == false then current = '' end
if current ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'token', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[4])
return 1
";

/// Whether a compare-and-set landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasOutcome {
    Landed,
    /// The token was not `expected`: someone else wrote.
    Conflict,
}

/// Writes `counter` with token `token` if the stored token is `expected`
/// (`None`: the counter must not exist yet). One round trip, no read.
pub async fn cas_write(
    con: &mut MultiplexedConnection,
    key: &str,
    expected: Option<&str>,
    token: &str,
    counter: &Counter,
) -> Result<CasOutcome, EscrowError> {
    let state = encode_state(key, counter)?;
    let landed: i64 = redis::cmd("EVAL")
        .arg(CAS_SCRIPT)
        .arg(2)
        .arg(counter_key(key))
        .arg(KEYS_SET)
        .arg(expected.unwrap_or(""))
        .arg(token)
        .arg(state)
        .arg(key)
        .query_async(con)
        .await?;
    Ok(if landed == 1 {
        CasOutcome::Landed
    } else {
        CasOutcome::Conflict
    })
}

/// The counters this site knows.
pub async fn known_keys(con: &mut MultiplexedConnection) -> Result<Vec<String>, EscrowError> {
    Ok(redis::cmd("SMEMBERS")
        .arg(KEYS_SET)
        .query_async(con)
        .await?)
}

/// Takes (removes and returns) up to `count` counters from the dirty set.
pub async fn take_dirty(
    con: &mut MultiplexedConnection,
    count: usize,
) -> Result<Vec<String>, EscrowError> {
    Ok(redis::cmd("SPOP")
        .arg(DIRTY_SET)
        .arg(count)
        .query_async(con)
        .await?)
}

/// Reads several replicas in one round trip, skipping unknown counters.
pub async fn load_many(
    con: &mut MultiplexedConnection,
    keys: &[String],
    me: ReplicaId,
    sites: usize,
) -> Result<Vec<(String, Result<Counter, EscrowError>)>, EscrowError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("HMGET")
            .arg(counter_key(key))
            .arg("state")
            .arg("token");
    }
    let rows: Vec<(Option<Vec<u8>>, Option<String>)> = pipe.query_async(con).await?;
    let mut out = Vec::with_capacity(rows.len());
    for (key, (state, token)) in keys.iter().zip(rows) {
        match record_of(key, state, token, me, sites) {
            Ok(Some(record)) => out.push((key.clone(), Ok(record.counter))),
            Ok(None) => {}
            Err(error) => out.push((key.clone(), Err(error))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_calls_are_read_from_commandstats() {
        let info = "# Commandstats\r\n\
                    cmdstat_get:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n\
                    cmdstat_info:calls=3,usec=1\r\n\
                    cmdstat_config|resetstat:calls=1,usec=1\r\n\
                    cmdstat_evalsha:calls=7,usec=9\r\n\
                    garbage line\r\n";
        let calls = parse_command_calls(info);
        assert_eq!(
            calls.into_iter().collect::<Vec<_>>(),
            vec![("evalsha".to_owned(), 7), ("get".to_owned(), 12)]
        );
    }
    use roost_bcounter::Bound;

    #[test]
    fn state_round_trips_and_checks_ownership() {
        let mut c = Counter::new(Bound::Lower, 5, ReplicaId(1), 3).unwrap();
        c.increment(4).unwrap();
        let json = encode_state("k", &c).unwrap();
        assert_eq!(
            decode_state("k", json.as_bytes(), ReplicaId(1), 3).unwrap(),
            c
        );
        let wrong_site = decode_state("k", json.as_bytes(), ReplicaId(0), 3).unwrap_err();
        assert!(
            wrong_site.to_string().contains("replica r1"),
            "{wrong_site}"
        );
        let wrong_size = decode_state("k", json.as_bytes(), ReplicaId(1), 4).unwrap_err();
        assert!(
            wrong_size.to_string().contains("knows 3 sites"),
            "{wrong_size}"
        );
    }

    #[test]
    fn corrupt_states_are_clear_errors() {
        for bad in [
            &b"garbage"[..],
            b"{}",
            br#"{"version": 2, "counter": {}}"#,
            br#"{"version": 1}"#,
            br#"{"version": 1, "counter": {"version": 1, "bound": "lower", "k": 0}}"#,
            // Spent more than it received.
            br#"{"version": 1, "counter": {"version": 1, "bound": "lower", "k": 0, "rights": {"version": 1, "me": 0, "row": [0, 0], "column": [0, 0], "diagonal": [1, 0], "u": [2, 0]}}}"#,
        ] {
            let error = decode_state("k", bad, ReplicaId(0), 2).unwrap_err();
            assert!(
                matches!(error, EscrowError::CorruptState { .. }),
                "{error:?}"
            );
            assert!(error.to_string().contains("counter `k`"), "{error}");
        }
    }

    #[test]
    fn tokens_are_distinct() {
        let a = Tokens::new();
        let b = Tokens::new();
        let (x, y, z) = (a.next(), a.next(), b.next());
        assert_ne!(x, y);
        assert_ne!(x, z);
    }
}

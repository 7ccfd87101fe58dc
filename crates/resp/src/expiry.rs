//! Keys with a time to live: EXPIRE and its forms, TTL and its forms,
//! PERSIST, GETEX, the deadlines of SET/SETEX/PSETEX, and the background
//! sweep that reclaims expired keys.
//!
//! **What is stored.** A key's deadline is an absolute Unix time in
//! milliseconds, stored in its entry beside the value ([`Entry::deadline`],
//! 0: none), never a relative time to live: a copy of the entry means the
//! same instant wherever it is read. A key with a deadline also has a row
//! `(deadline, key)` in its reactor's `expiry` relation, ordered by deadline,
//! written and removed in the same transaction as the entry.
//!
//! **When a key expires.** A key is gone once `now > deadline`, where `now`
//! is the transaction's one clock reading ([`Tx::now`]: taken the first time
//! the transaction needs it, then the same for every command of it). A
//! pipeline batch or a MULTI/EXEC block is one transaction, so it sees one
//! consistent keyspace: a key that expires while the EXEC runs is there for
//! all of its commands or for none. Reading an expired key never writes: it
//! is simply absent to the transaction (so a read stays a read-only
//! transaction, which a replica may serve); a write to it replaces or removes
//! its rows, and the sweep reclaims the rest. The clock is the server's wall
//! clock held monotonic within the process ([`Clock`]): a clock stepped back
//! does not bring keys back to life.
//!
//! **Reclamation.** A sweep thread per keyspace, every `expire_sweep_interval_ms`
//! (CONFIG SET hz changes it), runs sweep transactions: each walks the
//! reactors' `expiry` rows with a deadline before its clock reading, from
//! where the last one stopped, and deletes at most `expire_sweep_batch` keys;
//! a sweep that filled its batch is followed by another at once, for at most a
//! quarter of the interval. Work per transaction is bounded by the batch,
//! never by the size of the keyspace (INFO stats `roost_expire_sweep_max_keys`
//! reports the most one sweep deleted). DBSIZE counts keys until they are
//! reclaimed, as Redis's does.
//!
//! **Once keys replicate (issue 12).** Expiry stays a decision of the
//! transaction that reads the key, and the node that owns a key's reactor is
//! the one whose clock decides:
//! - the owner runs the writes and the sweep; a key's deletion at expiry is an
//!   ordinary committed transaction that replicates like any write, so
//!   replicas never delete a key on their own;
//! - a read-only transaction served by a replica compares the replicated
//!   absolute deadline with the replica's clock: it may see a key expire
//!   earlier or later than the owner would by the clocks' skew, and never
//!   writes; reads that must agree with the owner to the millisecond go to
//!   the owner;
//! - when ownership moves, the deadline moves with the entry (it is
//!   absolute, so a key's remaining life does not restart), and the new owner
//!   should start its clock at no less than the old owner's last reading
//!   (carried with the hand-over), so that a key one owner saw expire does
//!   not come back on the next; until then the skew between the two clocks
//!   bounds that window.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use roost_reactor::{KeyCodec, KeyDecodeError, ReactorCtx, ReactorError, ScanDirection};

use crate::protocol::Frame;
use crate::store::{
    headers_only, index_rows, After, Entry, Op, RowChange, Store, Tx, Write, EXPIRY_INDEX, KV,
    NOT_INTEGER, WRONGTYPE,
};
use crate::store::{parse_i64, KvKey};

/// A row of the `expiry` relation: a deadline (Unix ms, big-endian so rows
/// sort by it) and the key (the rest of the row key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExpiryKey {
    pub(crate) deadline: i64,
    pub(crate) key: Vec<u8>,
}

impl ExpiryKey {
    pub(crate) fn row(deadline: i64, key: &[u8]) -> ExpiryKey {
        ExpiryKey {
            deadline,
            key: key.to_vec(),
        }
    }
}

impl KeyCodec for ExpiryKey {
    fn encode_into(&self, out: &mut Vec<u8>) {
        // Deadlines are positive (a past one deletes the key instead).
        out.extend_from_slice(&(self.deadline.max(0) as u64).to_be_bytes());
        out.extend_from_slice(&self.key);
    }

    fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
        if input.len() < 8 {
            return Err(KeyDecodeError::Truncated {
                what: "expiry deadline",
                at: input.len(),
            });
        }
        let (head, rest) = input.split_at(8);
        let deadline = u64::from_be_bytes(head.try_into().expect("8 bytes"));
        let key = rest.to_vec();
        *input = &[];
        Ok(ExpiryKey {
            deadline: i64::try_from(deadline).unwrap_or(i64::MAX),
            key,
        })
    }
}

/// The server's wall clock in Unix milliseconds, never going back within the
/// process (a reading below the last one gives the last one).
#[derive(Default)]
pub(crate) struct Clock {
    last: AtomicI64,
}

impl Clock {
    pub(crate) fn now_ms(&self) -> i64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let last = self.last.load(Ordering::Relaxed);
        if wall > last {
            self.last.fetch_max(wall, Ordering::Relaxed);
            wall
        } else {
            last
        }
    }
}

/// Whether an entry with `deadline` (0: none) is gone at `now`.
pub(crate) fn is_expired(deadline: i64, now: i64) -> bool {
    deadline != 0 && now > deadline
}

/// The commands that take a time (for their error texts), one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeCommand {
    Set,
    SetEx,
    PSetEx,
    GetEx,
    Expire,
    PExpire,
    ExpireAt,
    PExpireAt,
}

impl TimeCommand {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TimeCommand::Set => "set",
            TimeCommand::SetEx => "setex",
            TimeCommand::PSetEx => "psetex",
            TimeCommand::GetEx => "getex",
            TimeCommand::Expire => "expire",
            TimeCommand::PExpire => "pexpire",
            TimeCommand::ExpireAt => "expireat",
            TimeCommand::PExpireAt => "pexpireat",
        }
    }
}

/// A deadline as a command gave it, resolved inside the transaction (a
/// relative one against the transaction's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    /// Milliseconds: from now when `relative`, else since the Unix epoch.
    pub(crate) ms: i64,
    pub(crate) relative: bool,
    /// The command, for `invalid expire time in '<command>' command`.
    pub(crate) command: TimeCommand,
}

impl Deadline {
    /// The absolute deadline at `now`, or Redis's error when it overflows.
    pub(crate) fn at(&self, now: i64) -> Result<i64, Frame> {
        let at = if self.relative {
            self.ms.checked_add(now)
        } else {
            Some(self.ms)
        };
        match at {
            Some(at) if at > 0 => Ok(at),
            _ => Err(invalid_expire_time(self.command.name())),
        }
    }
}

pub(crate) fn invalid_expire_time(command: &str) -> Frame {
    Frame::error(format!("ERR invalid expire time in '{command}' command"))
}

/// An expire argument of SET/SETEX/PSETEX/GETEX (Redis's
/// `getExpireMillisecondsOrReply`): a positive integer of seconds
/// (`in_ms` false) or milliseconds, relative or absolute.
pub(crate) fn parse_deadline(
    arg: &[u8],
    in_ms: bool,
    relative: bool,
    command: TimeCommand,
) -> Result<Deadline, Frame> {
    let n = parse_i64(arg).ok_or_else(|| Frame::error(NOT_INTEGER))?;
    if n <= 0 || (!in_ms && n > i64::MAX / 1000) {
        return Err(invalid_expire_time(command.name()));
    }
    Ok(Deadline {
        ms: if in_ms { n } else { n * 1000 },
        relative,
        command,
    })
}

/// SET's time to live: cleared (the default), kept (KEEPTTL) or set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetTtl {
    Clear,
    Keep,
    At(Deadline),
}

/// EXPIRE's condition (NX, XX, GT, LT; GT and LT may join XX).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ExpireCond {
    pub(crate) nx: bool,
    pub(crate) xx: bool,
    pub(crate) gt: bool,
    pub(crate) lt: bool,
}

/// What GETEX does to the time to live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GetExTtl {
    Leave,
    Persist,
    /// EX/PX/EXAT/PXAT with its argument, checked after the key is found
    /// (as Redis does: GETEX of a missing key answers nil whatever it is).
    Set {
        arg: Vec<u8>,
        in_ms: bool,
        relative: bool,
    },
}

/// A command about time to live.
#[derive(Debug, Clone)]
pub(crate) enum ExpireOp {
    /// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: `ms` relative to now when
    /// `relative` (it may be negative: the key is then deleted).
    Expire {
        key: Vec<u8>,
        ms: i64,
        relative: bool,
        cond: ExpireCond,
        command: TimeCommand,
    },
    /// TTL, PTTL, EXPIRETIME, PEXPIRETIME.
    Ttl {
        key: Vec<u8>,
        in_ms: bool,
        absolute: bool,
    },
    Persist(Vec<u8>),
    GetEx {
        key: Vec<u8>,
        ttl: GetExTtl,
    },
    /// The background sweep: deletes up to `limit` expired keys, visiting
    /// reactors from `start`. Replies `[deleted, next start, full (0/1)]`.
    Sweep {
        start: usize,
        limit: usize,
    },
}

impl ExpireOp {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        match self {
            ExpireOp::Expire { key, .. }
            | ExpireOp::Ttl { key, .. }
            | ExpireOp::Persist(key)
            | ExpireOp::GetEx { key, .. } => Some(key),
            ExpireOp::Sweep { .. } => None,
        }
    }
}

/// EXPIRE's options (Redis's `parseExtendedExpireArgumentsOrReply`).
pub(crate) fn parse_expire_cond(options: &[Vec<u8>]) -> Result<ExpireCond, Frame> {
    let mut cond = ExpireCond::default();
    for option in options {
        match option.to_ascii_lowercase().as_slice() {
            b"nx" => cond.nx = true,
            b"xx" => cond.xx = true,
            b"gt" => cond.gt = true,
            b"lt" => cond.lt = true,
            _ => {
                return Err(Frame::error(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(option)
                )))
            }
        }
    }
    if cond.nx && (cond.xx || cond.gt || cond.lt) {
        return Err(Frame::error(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if cond.gt && cond.lt {
        return Err(Frame::error(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(cond)
}

/// EXPIRE's time argument in milliseconds (Redis's overflow checks of the
/// unit; the addition of now is checked when it runs).
pub(crate) fn parse_expire_time(
    arg: &[u8],
    in_ms: bool,
    command: TimeCommand,
) -> Result<i64, Frame> {
    let n = parse_i64(arg).ok_or_else(|| Frame::error(NOT_INTEGER))?;
    if in_ms {
        return Ok(n);
    }
    n.checked_mul(1000)
        .ok_or_else(|| invalid_expire_time(command.name()))
}

/// The options of SET (after key and value) or GETEX (after the key), as
/// Redis's `parseExtendedStringArgumentsOrReply` accepts them: NX/XX/GET
/// (SET), KEEPTTL (SET), PERSIST (GETEX), EX/PX/EXAT/PXAT with an argument.
pub(crate) struct StringOptions<'a> {
    pub(crate) nx: bool,
    pub(crate) xx: bool,
    pub(crate) get: bool,
    pub(crate) keepttl: bool,
    pub(crate) persist: bool,
    /// EX/PX/EXAT/PXAT: argument, in ms, relative.
    pub(crate) expire: Option<(&'a [u8], bool, bool)>,
}

pub(crate) fn parse_string_options(
    options: &[Vec<u8>],
    set: bool,
) -> Result<StringOptions<'_>, Frame> {
    let mut o = StringOptions {
        nx: false,
        xx: false,
        get: false,
        keepttl: false,
        persist: false,
        expire: None,
    };
    // Which of EX, PX, EXAT, PXAT was given.
    let mut unit: Option<&'static str> = None;
    let mut i = 0;
    while i < options.len() {
        let option = options[i].to_ascii_lowercase();
        let next = options.get(i + 1);
        let other_unit = |name: &str| unit.is_some_and(|u| u != name);
        match option.as_slice() {
            b"nx" if set && !o.xx => o.nx = true,
            b"xx" if set && !o.nx => o.xx = true,
            b"get" if set => o.get = true,
            b"keepttl" if set && !o.persist && unit.is_none() => o.keepttl = true,
            b"persist" if !set && unit.is_none() && !o.keepttl => o.persist = true,
            b"ex" | b"px" | b"exat" | b"pxat" => {
                let name: &'static str = match option.as_slice() {
                    b"ex" => "ex",
                    b"px" => "px",
                    b"exat" => "exat",
                    _ => "pxat",
                };
                let Some(next) = next else {
                    return Err(syntax_error());
                };
                if o.keepttl || o.persist || other_unit(name) {
                    return Err(syntax_error());
                }
                unit = Some(name);
                let in_ms = name.starts_with('p');
                let relative = !name.ends_with("at");
                o.expire = Some((next.as_slice(), in_ms, relative));
                i += 1;
            }
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    Ok(o)
}

fn syntax_error() -> Frame {
    Frame::error("ERR syntax error")
}

/// Runs one command about time to live inside `tx`.
pub(crate) async fn apply(tx: &Tx, op: &ExpireOp) -> Result<Frame, ReactorError> {
    Ok(match op {
        ExpireOp::Expire {
            key,
            ms,
            relative,
            cond,
            command,
        } => {
            let base = if *relative { tx.now() } else { 0 };
            let Some(when) = ms.checked_add(base) else {
                return Ok(invalid_expire_time(command.name()));
            };
            tx.modify(key, |old| {
                let Some(old) = old else {
                    return (Write::Keep, Frame::Integer(0));
                };
                let current = old.deadline;
                let refused = (cond.nx && current != 0)
                    || (cond.xx && current == 0)
                    || (cond.gt && (current == 0 || when <= current))
                    || (cond.lt && current != 0 && when >= current);
                if refused {
                    return (Write::Keep, Frame::Integer(0));
                }
                // Redis's checkAlreadyExpired: a deadline not in the future
                // deletes the key.
                if when <= tx.now() {
                    return (Write::Delete, Frame::Integer(1));
                }
                (Write::Put(old.value, when), Frame::Integer(1))
            })
            .await?
        }
        ExpireOp::Ttl {
            key,
            in_ms,
            absolute,
        } => match tx.read_header(key).await? {
            None => Frame::Integer(-2),
            Some(Entry { deadline: 0, .. }) => Frame::Integer(-1),
            Some(entry) => {
                let ms = if *absolute {
                    entry.deadline
                } else {
                    (entry.deadline - tx.now()).max(0)
                };
                Frame::Integer(if *in_ms { ms } else { (ms + 500) / 1000 })
            }
        },
        ExpireOp::Persist(key) => {
            tx.modify(key, |old| match old {
                Some(old) if old.deadline != 0 => (Write::Put(old.value, 0), Frame::Integer(1)),
                _ => (Write::Keep, Frame::Integer(0)),
            })
            .await?
        }
        ExpireOp::GetEx { key, ttl } => {
            tx.modify(key, |old| {
                let Some(old) = old else {
                    return (Write::Keep, Frame::Null);
                };
                let Some(bytes) = old.value.string_bytes() else {
                    return (Write::Keep, Frame::error(WRONGTYPE));
                };
                let reply = Frame::Bulk(bytes.into_owned());
                match ttl {
                    GetExTtl::Leave => (Write::Keep, reply),
                    GetExTtl::Persist if old.deadline == 0 => (Write::Keep, reply),
                    GetExTtl::Persist => (Write::Put(old.value, 0), reply),
                    GetExTtl::Set {
                        arg,
                        in_ms,
                        relative,
                    } => {
                        let deadline = parse_deadline(arg, *in_ms, *relative, TimeCommand::GetEx)
                            .and_then(|d| d.at(tx.now()));
                        match deadline {
                            Err(error) => (Write::Keep, error),
                            // An absolute deadline already past deletes it.
                            Ok(at) if !*relative && at <= tx.now() => (Write::Delete, reply),
                            Ok(at) => (Write::Put(old.value, at), reply),
                        }
                    }
                }
            })
            .await?
        }
        ExpireOp::Sweep { start, limit } => sweep(tx, *start, *limit).await?,
    })
}

/// Reactors one sweep transaction visits at most: with many reactors (a
/// cluster's keyspace has up to a million) a sweep that visited them all
/// would cost a core whatever expired; the next sweep goes on from where
/// this one stopped.
pub(crate) const SWEEP_MAX_REACTORS: usize = 1024;

/// One sweep transaction: deletes up to `limit` keys whose deadline passed,
/// reactor by reactor from `start`, visiting at most [`SWEEP_MAX_REACTORS`].
async fn sweep(tx: &Tx, start: usize, limit: usize) -> Result<Frame, ReactorError> {
    let reactors = tx.reactor_count();
    let now = tx.now();
    let mut left = limit.max(1);
    let mut index = start % reactors;
    let mut deleted = 0;
    let mut full = false;
    for _ in 0..reactors.min(SWEEP_MAX_REACTORS) {
        if !tx.lives_here(index) {
            // Held by another node of a cluster: its owner sweeps it
            // (acquiring it to sweep would pull every reactor here).
            index = (index + 1) % reactors;
            continue;
        }
        let (n, change) = tx
            .on_reactor(index, move |ctx, _| sweep_reactor(ctx, now, left))
            .await?;
        tx.note(change);
        deleted += n;
        left -= n;
        if left == 0 {
            // Full: the next sweep starts here again.
            full = true;
            break;
        }
        index = (index + 1) % reactors;
    }
    Ok(Frame::Array(vec![
        Frame::Integer(deleted as i64),
        Frame::Integer(index as i64),
        Frame::Integer(i64::from(full)),
    ]))
}

/// Deletes up to `limit` keys of this reactor whose deadline is before `now`.
fn sweep_reactor(
    ctx: &ReactorCtx,
    now: i64,
    limit: usize,
) -> Result<(usize, RowChange), ReactorError> {
    let due = ctx.scan(
        &EXPIRY_INDEX,
        ..ExpiryKey {
            deadline: now,
            key: Vec::new(),
        },
        ScanDirection::Forward,
        limit,
    )?;
    let mut change = RowChange::default();
    let count = due.len();
    for (row, ()) in due {
        let key = KvKey(row.key);
        let entry: Option<Entry> = headers_only(|| ctx.get(&KV, &key))?;
        match entry {
            Some(entry) if entry.deadline == row.deadline => {
                crate::members::drop_all(ctx, &key.0, entry.value.members())?;
                change.add(index_rows(
                    ctx,
                    &key,
                    Some((entry.deadline, true)),
                    After::Delete,
                )?);
            }
            // A row whose key no longer has this deadline (the writes keep
            // them in step, so none should exist): dropped.
            _ => {
                ctx.delete(
                    &EXPIRY_INDEX,
                    &ExpiryKey {
                        deadline: row.deadline,
                        key: key.0,
                    },
                )?;
            }
        }
    }
    Ok((count, change))
}

/// Starts `store`'s sweep thread; it ends once the store is dropped.
pub(crate) fn start_sweeper(store: &Arc<Store>) -> std::io::Result<()> {
    let weak = Arc::downgrade(store);
    std::thread::Builder::new()
        .name("roost-expire".into())
        .spawn(move || sweeper(weak))
        .map(|_| ())
}

fn sweeper(store: Weak<Store>) {
    let mut start = 0usize;
    loop {
        let interval = match store.upgrade() {
            Some(store) => store.sweep_interval(),
            None => return,
        };
        std::thread::sleep(interval);
        let Some(store) = store.upgrade() else {
            return;
        };
        let until = Instant::now() + interval / 4;
        loop {
            let op = Op::Expire(ExpireOp::Sweep {
                start,
                limit: store.sweep_batch(),
            });
            let Ok((deleted, next, full)) = store.sweep_once(op) else {
                break;
            };
            start = next;
            store.stats().note_sweep(deleted);
            if !full || Instant::now() >= until {
                break;
            }
        }
    }
}

/// The sweep interval for Redis's `hz` (sweeps a second), and back.
pub(crate) fn interval_of_hz(hz: u64) -> Duration {
    Duration::from_millis(1000 / hz.clamp(1, 500))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<Vec<u8>> {
        text.split(' ')
            .filter(|s| !s.is_empty())
            .map(|s| s.as_bytes().to_vec())
            .collect()
    }

    #[test]
    fn expiry_rows_sort_by_deadline() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        ExpiryKey {
            deadline: 255,
            key: b"zz".to_vec(),
        }
        .encode_into(&mut a);
        ExpiryKey {
            deadline: 256,
            key: b"a".to_vec(),
        }
        .encode_into(&mut b);
        assert!(a < b);
        let mut input = b.as_slice();
        let back = ExpiryKey::decode_from(&mut input).unwrap();
        assert_eq!(back.deadline, 256);
        assert_eq!(back.key, b"a");
        assert!(ExpiryKey::decode_from(&mut &b"short"[..]).is_err());
    }

    #[test]
    fn clock_never_goes_back() {
        let clock = Clock::default();
        clock.last.store(i64::MAX - 5, Ordering::Relaxed);
        assert_eq!(clock.now_ms(), i64::MAX - 5);
        let clock = Clock::default();
        let a = clock.now_ms();
        assert!(a > 1_600_000_000_000);
        assert!(clock.now_ms() >= a);
    }

    #[test]
    fn expiry_is_after_the_deadline() {
        assert!(!is_expired(0, i64::MAX));
        assert!(!is_expired(10, 10));
        assert!(is_expired(10, 11));
    }

    #[test]
    fn deadlines_follow_redis() {
        assert_eq!(
            parse_deadline(b"0", false, true, TimeCommand::Set),
            Err(invalid_expire_time("set"))
        );
        assert_eq!(
            parse_deadline(b"-1", true, true, TimeCommand::PSetEx),
            Err(Frame::error("ERR invalid expire time in 'psetex' command"))
        );
        assert_eq!(
            parse_deadline(b"x", true, true, TimeCommand::Set),
            Err(Frame::error(NOT_INTEGER))
        );
        assert_eq!(
            parse_deadline(b"9223372036854776", false, true, TimeCommand::Set),
            Err(invalid_expire_time("set"))
        );
        let d = parse_deadline(b"10", false, true, TimeCommand::Set).unwrap();
        assert_eq!(d.at(5), Ok(10_005));
        let d = parse_deadline(b"9223372036854775807", true, true, TimeCommand::Set).unwrap();
        assert_eq!(d.at(5), Err(invalid_expire_time("set")));
        assert_eq!(
            parse_expire_time(b"-5", false, TimeCommand::Expire),
            Ok(-5000)
        );
        assert_eq!(
            parse_expire_time(b"9223372036854775807", false, TimeCommand::Expire),
            Err(invalid_expire_time("expire"))
        );
    }

    #[test]
    fn expire_conditions() {
        assert_eq!(
            parse_expire_cond(&args("xx gt")),
            Ok(ExpireCond {
                xx: true,
                gt: true,
                ..ExpireCond::default()
            })
        );
        assert_eq!(
            parse_expire_cond(&args("nx xx")).unwrap_err(),
            Frame::error("ERR NX and XX, GT or LT options at the same time are not compatible")
        );
        assert_eq!(
            parse_expire_cond(&args("gt lt")).unwrap_err(),
            Frame::error("ERR GT and LT options at the same time are not compatible")
        );
        assert_eq!(
            parse_expire_cond(&args("Foo")).unwrap_err(),
            Frame::error("ERR Unsupported option Foo")
        );
    }

    #[test]
    fn string_options() {
        let options = args("nx px 100 get");
        let o = parse_string_options(&options, true).unwrap();
        assert!(o.nx && o.get && !o.xx);
        assert_eq!(o.expire, Some((&b"100"[..], true, true)));
        // The same unit twice is allowed (the last wins), two units are not.
        assert!(parse_string_options(&args("ex 1 ex 2"), true).is_ok());
        for bad in [
            "ex 1 px 1",
            "keepttl ex 1",
            "ex 1 keepttl",
            "nx xx",
            "ex",
            "persist",
            "foo",
        ] {
            assert!(parse_string_options(&args(bad), true).is_err(), "{bad}");
        }
        assert!(
            parse_string_options(&args("persist"), false)
                .unwrap()
                .persist
        );
        for bad in ["persist ex 1", "nx", "get", "keepttl"] {
            assert!(parse_string_options(&args(bad), false).is_err(), "{bad}");
        }
    }
}

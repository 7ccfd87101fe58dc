//! The server commands clients send on connect and operators run: the
//! client registry (CLIENT LIST/INFO), CONFIG GET/SET of the parameters
//! Roost has, COMMAND (COUNT, INFO, DOCS, LIST, GETKEYS), INFO's sections
//! and TIME.
//!
//! **CONFIG.** GET matches its glob patterns against the parameters below
//! and answers only those (an unknown name or pattern: an empty reply, as
//! Redis does). SET changes `maxclients` (new connections) and `hz` (the
//! expiry sweep's period, 1000/hz ms); parameters that describe what Roost
//! is (`appendonly no`, `save ""`, `maxmemory 0`, `maxmemory-policy
//! noeviction`, ...) accept only their value, and the rest are immutable,
//! each refused with Redis's wording. Redis's encoding thresholds
//! (`hash-max-listpack-entries` and its `ziplist` alias, `list-max-listpack-size`,
//! `set-max-intset-entries`, ...) are accepted within Redis's bounds,
//! remembered and reported, and change nothing: Roost stores each type one
//! way (a hash, set or sorted set as a row per member, a list as one value),
//! so there is no encoding to switch.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::commands::{
    self, arity_ok, command_docs, command_info, help, lookup, numkeys_at, unknown_subcommand,
    wrong_subcommand_arity, Kind,
};
use crate::expiry::interval_of_hz;
use crate::keyspace::glob_match;
use crate::protocol::{Args, Frame};
use crate::server::ServerShared;
use crate::store::parse_i64;

/// The longest CLIENT SETINFO value.
const MAX_CLIENT_INFO_BYTES: usize = 256;

/// What CLIENT LIST shows of one connection, shared between the connection
/// (which updates it) and the registry.
pub(crate) struct ClientInfo {
    pub(crate) id: u64,
    addr: String,
    laddr: String,
    fd: i64,
    created: Instant,
    pub(crate) name: Mutex<Option<Vec<u8>>>,
    /// CLIENT SETINFO's LIB-NAME and LIB-VER.
    lib: Mutex<(String, String)>,
    user: Mutex<String>,
    /// Milliseconds after `created` of the last command, and the command
    /// (its index in the table plus one; 0: none yet).
    last_active_ms: AtomicU64,
    last_command: AtomicUsize,
    /// Commands queued in MULTI; -1 outside MULTI.
    pub(crate) multi: AtomicI64,
    pub(crate) resp: AtomicU8,
    no_evict: AtomicBool,
}

impl ClientInfo {
    /// Notes the last command a connection ran (once per read).
    pub(crate) fn note_command(&self, index: usize) {
        let ms = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_active_ms.store(ms, Ordering::Relaxed);
        self.last_command.store(index + 1, Ordering::Relaxed);
    }

    pub(crate) fn set_user(&self, user: &str) {
        *self.user.lock().expect("client user") = user.to_owned();
    }

    /// One line of CLIENT LIST (Redis 7's fields; the buffer figures are 0).
    fn line(&self) -> String {
        let age = self.created.elapsed().as_secs();
        let idle = age.saturating_sub(self.last_active_ms.load(Ordering::Relaxed) / 1000);
        let name = self
            .name
            .lock()
            .expect("client name")
            .as_deref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let (lib_name, lib_ver) = self.lib.lock().expect("client lib").clone();
        let multi = self.multi.load(Ordering::Relaxed);
        let mut flags = String::new();
        if multi >= 0 {
            flags.push('x');
        }
        if self.no_evict.load(Ordering::Relaxed) {
            flags.push('e');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let cmd = match self.last_command.load(Ordering::Relaxed) {
            0 => "NULL",
            i => commands::COMMANDS.get(i - 1).map_or("NULL", |s| s.name),
        };
        format!(
            "id={} addr={} laddr={} fd={} name={name} age={age} idle={idle} flags={flags} db=0 sub=0 psub=0 ssub=0 multi={multi} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={cmd} user={} redir=-1 resp={} lib-name={lib_name} lib-ver={lib_ver}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            self.user.lock().expect("client user"),
            self.resp.load(Ordering::Relaxed),
        )
    }
}

/// The connections open now, by id.
#[derive(Default)]
pub(crate) struct Clients {
    by_id: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
}

/// Removes a connection from the registry when it ends.
pub(crate) struct Registered<'a> {
    clients: &'a Clients,
    pub(crate) info: Arc<ClientInfo>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.clients
            .by_id
            .lock()
            .expect("client registry")
            .remove(&self.info.id);
    }
}

/// A connection's two ends and its descriptor, for CLIENT LIST.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Peer {
    pub(crate) addr: Option<SocketAddr>,
    pub(crate) local: Option<SocketAddr>,
    pub(crate) fd: Option<i64>,
}

impl Clients {
    pub(crate) fn register(&self, id: u64, peer: Peer, user: &str) -> Registered<'_> {
        let show = |a: Option<SocketAddr>| a.map_or_else(String::new, |a| a.to_string());
        let info = Arc::new(ClientInfo {
            id,
            addr: show(peer.addr),
            laddr: show(peer.local),
            fd: peer.fd.unwrap_or(-1),
            created: Instant::now(),
            name: Mutex::new(None),
            lib: Mutex::new((String::new(), String::new())),
            user: Mutex::new(user.to_owned()),
            last_active_ms: AtomicU64::new(0),
            last_command: AtomicUsize::new(0),
            multi: AtomicI64::new(-1),
            resp: AtomicU8::new(2),
            no_evict: AtomicBool::new(false),
        });
        self.by_id
            .lock()
            .expect("client registry")
            .insert(id, Arc::clone(&info));
        Registered {
            clients: self,
            info,
        }
    }

    fn all(&self) -> Vec<Arc<ClientInfo>> {
        self.by_id
            .lock()
            .expect("client registry")
            .values()
            .cloned()
            .collect()
    }

    fn get(&self, id: u64) -> Option<Arc<ClientInfo>> {
        self.by_id
            .lock()
            .expect("client registry")
            .get(&id)
            .cloned()
    }
}

const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "    * ID <client-id> [<client-id> ...]",
    "      Return clients of specified IDs only.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "HELP",
    "    Print this help.",
];

/// The CLIENT subcommands that need no connection state beyond `info`
/// (SETNAME/GETNAME/ID are the connection's).
pub(crate) fn client(shared: &ServerShared, info: &ClientInfo, args: &Args) -> Frame {
    let sub = args[1].to_ascii_lowercase();
    let arity = || wrong_subcommand_arity("client", &args[1]);
    match sub.as_slice() {
        b"info" if args.len() == 2 => verbatim(info.line() + "\n"),
        b"list" => {
            let lines: Vec<Arc<ClientInfo>> = match &args[2..] {
                [] => shared.clients.all(),
                [option, kind] if option.eq_ignore_ascii_case(b"type") => {
                    match kind.to_ascii_lowercase().as_slice() {
                        b"normal" => shared.clients.all(),
                        b"master" | b"replica" | b"slave" | b"pubsub" => Vec::new(),
                        _ => {
                            return Frame::error(format!(
                                "ERR Unknown client type '{}'",
                                String::from_utf8_lossy(kind)
                            ))
                        }
                    }
                }
                [option, ids @ ..] if option.eq_ignore_ascii_case(b"id") && !ids.is_empty() => {
                    let mut found = Vec::new();
                    for id in ids {
                        let Some(id) = parse_i64(id) else {
                            return Frame::error("ERR Invalid client ID");
                        };
                        if let Some(client) =
                            u64::try_from(id).ok().and_then(|id| shared.clients.get(id))
                        {
                            found.push(client);
                        }
                    }
                    found
                }
                _ => return Frame::error("ERR syntax error"),
            };
            verbatim(lines.iter().map(|c| c.line() + "\n").collect())
        }
        b"no-evict" if args.len() == 3 => {
            let on = if args[2].eq_ignore_ascii_case(b"on") {
                true
            } else if args[2].eq_ignore_ascii_case(b"off") {
                false
            } else {
                return Frame::error("ERR syntax error");
            };
            info.no_evict.store(on, Ordering::Relaxed);
            Frame::ok()
        }
        b"setinfo" if args.len() == 4 => {
            let attr = args[2].to_ascii_lowercase();
            let value = &args[3];
            let shown = String::from_utf8_lossy(&args[2]);
            if attr != b"lib-name" && attr != b"lib-ver" {
                return Frame::error(format!("ERR Unrecognized option '{shown}'"));
            }
            if value.len() > MAX_CLIENT_INFO_BYTES
                || value.iter().any(|&b| !(b'!'..=b'~').contains(&b))
            {
                return Frame::error(format!(
                    "ERR {shown} cannot contain spaces, newlines or special characters."
                ));
            }
            let value = String::from_utf8_lossy(value).into_owned();
            let mut lib = info.lib.lock().expect("client lib");
            if attr == b"lib-name" {
                lib.0 = value;
            } else {
                lib.1 = value;
            }
            Frame::ok()
        }
        b"help" if args.len() == 2 => help(CLIENT_HELP),
        b"info" | b"no-evict" | b"setinfo" | b"help" => arity(),
        _ => unknown_subcommand("client", &args[1]),
    }
}

fn verbatim(text: String) -> Frame {
    Frame::Verbatim {
        format: *b"txt",
        text: text.into_bytes(),
    }
}

/// What a parameter accepts from CONFIG SET.
enum Settable {
    /// Refused: "can't set immutable config".
    Immutable,
    /// Only its current value (what Roost is, not a choice).
    Fixed(&'static str),
    MaxClients,
    Hz,
    /// Lua scripts' time limit in ms (`lua_time_limit_ms`), under both of
    /// Redis 7's names.
    LuaTimeLimit,
    /// An encoding threshold: [`THRESHOLDS`]`[i]`.
    Threshold(usize),
}

/// Redis 7.0's encoding thresholds: (default, least, most), by slot.
const THRESHOLDS: [(i64, i64, i64); 10] = [
    (512, 0, i64::MAX),                     // hash-max-listpack-entries
    (64, 0, i64::MAX),                      // hash-max-listpack-value
    (-2, i32::MIN as i64, i32::MAX as i64), // list-max-listpack-size
    (0, 0, i32::MAX as i64),                // list-compress-depth
    (512, 0, i64::MAX),                     // set-max-intset-entries
    (128, 0, i64::MAX),                     // zset-max-listpack-entries
    (64, 0, i64::MAX),                      // zset-max-listpack-value
    (4096, 0, i64::MAX),                    // stream-node-max-bytes
    (100, 0, i64::MAX),                     // stream-node-max-entries
    (3000, 0, i64::MAX),                    // hll-sparse-max-bytes
];

/// The encoding thresholds' current values.
pub(crate) struct Thresholds([AtomicI64; THRESHOLDS.len()]);

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds(THRESHOLDS.map(|(default, _, _)| AtomicI64::new(default)))
    }
}

/// Roost's parameters under their Redis names.
const PARAMETERS: &[(&str, Settable)] = &[
    ("appendonly", Settable::Fixed("not persisting to disk")),
    ("bind", Settable::Immutable),
    ("busy-reply-threshold", Settable::LuaTimeLimit),
    ("cluster-enabled", Settable::Immutable),
    ("databases", Settable::Immutable),
    ("hash-max-listpack-entries", Settable::Threshold(0)),
    ("hash-max-listpack-value", Settable::Threshold(1)),
    ("hash-max-ziplist-entries", Settable::Threshold(0)),
    ("hash-max-ziplist-value", Settable::Threshold(1)),
    ("hll-sparse-max-bytes", Settable::Threshold(9)),
    ("hz", Settable::Hz),
    ("io-threads", Settable::Immutable),
    ("list-compress-depth", Settable::Threshold(3)),
    ("list-max-listpack-size", Settable::Threshold(2)),
    ("list-max-ziplist-size", Settable::Threshold(2)),
    ("lua-time-limit", Settable::LuaTimeLimit),
    ("maxclients", Settable::MaxClients),
    ("maxmemory", Settable::Fixed("not evicting keys")),
    ("maxmemory-policy", Settable::Fixed("not evicting keys")),
    (
        "notify-keyspace-events",
        Settable::Fixed("without keyspace notifications"),
    ),
    ("port", Settable::Immutable),
    ("proto-max-bulk-len", Settable::Immutable),
    ("save", Settable::Fixed("not persisting to disk")),
    ("set-max-intset-entries", Settable::Threshold(4)),
    ("stream-node-max-bytes", Settable::Threshold(7)),
    ("stream-node-max-entries", Settable::Threshold(8)),
    ("timeout", Settable::Fixed("without idle timeouts")),
    ("zset-max-listpack-entries", Settable::Threshold(5)),
    ("zset-max-listpack-value", Settable::Threshold(6)),
    ("zset-max-ziplist-entries", Settable::Threshold(5)),
    ("zset-max-ziplist-value", Settable::Threshold(6)),
];

fn parameter_value(shared: &ServerShared, name: &str) -> String {
    if let Some((_, Settable::Threshold(slot))) = PARAMETERS.iter().find(|(n, _)| *n == name) {
        return shared.thresholds.0[*slot]
            .load(Ordering::Relaxed)
            .to_string();
    }
    match name {
        "appendonly" => "no".into(),
        "bind" => shared.config.bind.ip().to_string(),
        "cluster-enabled" => "no".into(),
        "databases" => "1".into(),
        "hz" => {
            let ms = shared.store.sweep_interval().as_millis().max(1);
            (1000 / ms).max(1).to_string()
        }
        "io-threads" => shared.config.io_threads.to_string(),
        "busy-reply-threshold" | "lua-time-limit" => shared
            .functions
            .scripting()
            .time_limit()
            .as_millis()
            .to_string(),
        "maxclients" => shared.max_clients.load(Ordering::Relaxed).to_string(),
        "maxmemory" => "0".into(),
        "maxmemory-policy" => "noeviction".into(),
        "notify-keyspace-events" => String::new(),
        "port" => shared.port.to_string(),
        "proto-max-bulk-len" => shared.config.max_bulk_bytes.to_string(),
        "save" => String::new(),
        "timeout" => "0".into(),
        _ => String::new(),
    }
}

const CONFIG_HELP: &[&str] = &[
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
    "    Prints this help.",
];

/// CONFIG; `read_only_user`: the name of a read-only user running it (who
/// may GET but not SET).
pub(crate) fn config(shared: &ServerShared, args: &Args, read_only_user: Option<&str>) -> Frame {
    let sub = args[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"get" if args.len() >= 3 => {
            let mut pairs = Vec::new();
            for (name, _) in PARAMETERS {
                let wanted = args[2..].iter().any(|pattern| {
                    let pattern = pattern.to_ascii_lowercase();
                    glob_match(&pattern, name.as_bytes())
                });
                if wanted {
                    pairs.push((
                        Frame::bulk(*name),
                        Frame::bulk(parameter_value(shared, name)),
                    ));
                }
            }
            Frame::Map(pairs)
        }
        b"set" if args.len() >= 4 && args.len() % 2 == 0 => {
            if let Some(user) = read_only_user {
                return Frame::error(format!(
                    "NOPERM User {user} has no permissions to run the 'config|set' command"
                ));
            }
            config_set(shared, &args[2..])
        }
        b"resetstat" if args.len() == 2 => {
            shared.stats.reset();
            Frame::ok()
        }
        b"rewrite" if args.len() == 2 => {
            Frame::error("ERR The server is running without a config file")
        }
        b"help" if args.len() == 2 => help(CONFIG_HELP),
        b"get" | b"set" | b"resetstat" | b"rewrite" | b"help" => {
            wrong_subcommand_arity("config", &args[1])
        }
        _ => unknown_subcommand("config", &args[1]),
    }
}

/// CONFIG SET name value [name value ...]: all or none.
fn config_set(shared: &ServerShared, pairs: &[Vec<u8>]) -> Frame {
    let mut changes = Vec::new();
    let mut thresholds = Vec::new();
    for pair in pairs.chunks_exact(2) {
        let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        let value = String::from_utf8_lossy(&pair[1]).into_owned();
        let Some((name, settable)) = PARAMETERS.iter().find(|(n, _)| *n == name) else {
            return Frame::error(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                String::from_utf8_lossy(&pair[0])
            ));
        };
        let failed = |why: &str| {
            Frame::error(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
            ))
        };
        match settable {
            Settable::Immutable => return failed("can't set immutable config"),
            Settable::Fixed(what) => {
                let current = parameter_value(shared, name);
                if !value.eq_ignore_ascii_case(&current) {
                    return failed(&format!("Roost runs {what}: only '{current}' is supported"));
                }
            }
            Settable::MaxClients | Settable::Hz | Settable::LuaTimeLimit => {
                let Some(n) = parse_i64(value.as_bytes()) else {
                    return failed("argument couldn't be parsed into an integer");
                };
                let (min, max) = match settable {
                    Settable::Hz => (1, 500),
                    Settable::LuaTimeLimit => (1, 3_600_000),
                    _ => (1, 1 << 20),
                };
                if !(min..=max).contains(&n) {
                    return failed(&format!(
                        "argument must be between {min} and {max} inclusive"
                    ));
                }
                changes.push((*name, n as u64));
            }
            &Settable::Threshold(slot) => {
                let Some(n) = parse_i64(value.as_bytes()) else {
                    return failed("argument couldn't be parsed into an integer");
                };
                let (_, min, max) = THRESHOLDS[slot];
                if !(min..=max).contains(&n) {
                    return failed(&format!(
                        "argument must be between {min} and {max} inclusive"
                    ));
                }
                thresholds.push((slot, n));
            }
        }
    }
    // All or none: nothing changes before every pair was accepted.
    for (slot, n) in thresholds {
        shared.thresholds.0[slot].store(n, Ordering::Relaxed);
    }
    for (name, n) in changes {
        match name {
            "hz" => shared.store.set_sweep_interval(interval_of_hz(n)),
            "maxclients" => shared.max_clients.store(n as usize, Ordering::Relaxed),
            "busy-reply-threshold" | "lua-time-limit" => {
                shared.functions.scripting().set_time_limit(n)
            }
            _ => {}
        }
    }
    Frame::ok()
}

const COMMAND_HELP: &[&str] = &[
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "HELP",
    "    Print this help.",
];

/// `COMMAND`, `COMMAND COUNT|LIST|INFO|DOCS|GETKEYS|HELP`.
pub(crate) fn command(args: &Args) -> Frame {
    let all = commands::COMMANDS;
    let Some(sub) = args.get(1) else {
        return Frame::Array(all.iter().map(command_info).collect());
    };
    let named = || args[2..].iter().map(|name| lookup(name));
    match sub.to_ascii_lowercase().as_slice() {
        b"count" if args.len() == 2 => Frame::Integer(all.len() as i64),
        b"list" if args.len() == 2 => {
            Frame::Array(all.iter().map(|s| Frame::bulk(s.name)).collect())
        }
        b"info" if args.len() == 2 => Frame::Array(all.iter().map(command_info).collect()),
        b"info" => Frame::Array(
            named()
                .map(|spec| spec.map_or(Frame::Null, command_info))
                .collect(),
        ),
        b"docs" if args.len() == 2 => Frame::Map(all.iter().map(command_docs).collect()),
        b"docs" => Frame::Map(named().flatten().map(command_docs).collect()),
        b"getkeys" if args.len() >= 4 => getkeys(&args[2..]),
        b"help" if args.len() == 2 => help(COMMAND_HELP),
        b"count" | b"list" | b"getkeys" | b"help" => wrong_subcommand_arity("command", sub),
        _ => unknown_subcommand("command", sub),
    }
}

/// COMMAND GETKEYS: the keys of `args` (a full command) by its key
/// positions.
fn getkeys(args: &[Vec<u8>]) -> Frame {
    let Some(spec) = lookup(&args[0]).filter(|s| !matches!(s.kind, Kind::Unsupported(_))) else {
        return Frame::error("ERR Invalid command specified");
    };
    let movable = numkeys_at(spec.name);
    if spec.first_key == 0 && movable.is_none() {
        return Frame::error("ERR The command has no key arguments");
    }
    if !arity_ok(spec, args.len()) {
        return Frame::error("ERR Invalid number of arguments specified for command");
    }
    let keys: Vec<Frame> = if let Some(at) = movable {
        // FCALL function numkeys key..., ZUNIONSTORE destination numkeys
        // key..., ZUNION numkeys key...
        let named = match args.get(at).and_then(|n| parse_i64(n)) {
            Some(n) if n >= 0 && (n as usize) < args.len() - at => {
                &args[at + 1..at + 1 + n as usize]
            }
            _ => return Frame::error("ERR Invalid arguments specified for command"),
        };
        let destination = (spec.first_key > 0).then(|| &args[1]);
        destination
            .into_iter()
            .chain(named)
            .map(|k| Frame::Bulk(k.clone()))
            .collect()
    } else {
        let first = spec.first_key as usize;
        let last = if spec.last_key < 0 {
            (args.len() as i64 + i64::from(spec.last_key)).max(0) as usize
        } else {
            spec.last_key as usize
        };
        let step = spec.step.max(1) as usize;
        // SORT's STORE destination, found by its keyword (Redis's
        // `sortGetKeys`).
        let store = (spec.name == "sort")
            .then(|| crate::sort::store_key_position(args))
            .flatten();
        (first..=last.min(args.len() - 1))
            .step_by(step)
            .chain(store)
            .map(|i| Frame::Bulk(args[i].clone()))
            .collect()
    };
    if keys.is_empty() {
        return Frame::error("ERR Invalid arguments specified for command");
    }
    Frame::Array(keys)
}

/// TIME: seconds and microseconds, as bulk strings.
pub(crate) fn time() -> Frame {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Frame::Array(vec![
        Frame::bulk(now.as_secs().to_string()),
        Frame::bulk(now.subsec_micros().to_string()),
    ])
}

/// The process's resident memory in bytes (Linux; 0 elsewhere).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(0, |kb| kb * 1024)
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}B")
    } else {
        format!("{value:.2}{}", UNITS[unit])
    }
}

/// INFO [section ...]: Redis's sections (server, clients, memory,
/// persistence, stats, replication, keyspace) and Roost's (latency), plus
/// commandstats.
pub(crate) fn info(shared: &ServerShared, sections: &[Vec<u8>]) -> Frame {
    let sections: Vec<Vec<u8>> = sections.iter().map(|s| s.to_ascii_lowercase()).collect();
    let all = sections.is_empty()
        || sections
            .iter()
            .any(|s| matches!(s.as_slice(), b"all" | b"default" | b"everything"));
    let wanted = |name: &str, by_default: bool| {
        sections.iter().any(|s| s == name.as_bytes())
            || (all
                && (by_default
                    || sections
                        .iter()
                        .any(|s| matches!(s.as_slice(), b"all" | b"everything"))))
    };
    // One reading of the counters: the figures `GET /metrics` shows.
    let snap = shared.stats.snapshot();
    let mut text = String::new();
    let mut section = |title: &str, fields: Vec<(String, String)>| {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        text.push_str(&format!("# {title}\r\n"));
        for (k, v) in fields {
            text.push_str(&format!("{k}:{v}\r\n"));
        }
    };
    let field = |k: &str, v: String| (k.to_owned(), v);
    let hz = parameter_value(shared, "hz");
    if wanted("server", true) {
        section(
            "Server",
            vec![
                field("redis_version", crate::REDIS_VERSION.into()),
                field("roost_version", env!("CARGO_PKG_VERSION").into()),
                field("redis_git_sha1", "00000000".into()),
                field("redis_git_dirty", "0".into()),
                field("redis_mode", "standalone".into()),
                field("os", std::env::consts::OS.into()),
                field("arch_bits", (usize::BITS).to_string()),
                field("multiplexing_api", "epoll".into()),
                field("process_id", std::process::id().to_string()),
                field("run_id", format!("{:040x}", shared.run_id)),
                field("tcp_port", shared.port.to_string()),
                field("uptime_in_seconds", snap.uptime_seconds.to_string()),
                field("uptime_in_days", (snap.uptime_seconds / 86_400).to_string()),
                field("hz", hz.clone()),
                field("configured_hz", hz),
                field("executable", String::new()),
                field("config_file", String::new()),
                field(
                    "keyspace_reactors",
                    shared.config.keyspace_reactors.to_string(),
                ),
                field("executors", shared.config.executors.to_string()),
            ],
        );
    }
    if wanted("clients", true) {
        section(
            "Clients",
            vec![
                field("connected_clients", snap.connected_clients.to_string()),
                field(
                    "maxclients",
                    shared.max_clients.load(Ordering::Relaxed).to_string(),
                ),
                field(
                    "blocked_clients",
                    shared.blocked_clients.load(Ordering::Relaxed).to_string(),
                ),
                field("tracking_clients", "0".into()),
                field(
                    "max_reply_buffer_bytes",
                    snap.max_reply_buffer_bytes.to_string(),
                ),
            ],
        );
    }
    if wanted("memory", true) {
        let rss = resident_bytes();
        section(
            "Memory",
            vec![
                field("used_memory", rss.to_string()),
                field("used_memory_human", human_bytes(rss)),
                field("used_memory_rss", rss.to_string()),
                field("used_memory_rss_human", human_bytes(rss)),
                field("maxmemory", "0".into()),
                field("maxmemory_human", "0B".into()),
                field("maxmemory_policy", "noeviction".into()),
                field("mem_allocator", "roost".into()),
                field(
                    "number_of_cached_scripts",
                    shared.functions.scripting().cached_scripts().to_string(),
                ),
            ],
        );
    }
    if wanted("persistence", true) {
        section(
            "Persistence",
            vec![
                field("loading", "0".into()),
                field("async_loading", "0".into()),
                field("rdb_changes_since_last_save", "0".into()),
                field("rdb_bgsave_in_progress", "0".into()),
                field("rdb_last_bgsave_status", "ok".into()),
                field("aof_enabled", "0".into()),
                field("aof_rewrite_in_progress", "0".into()),
            ],
        );
    }
    if wanted("stats", true) {
        section(
            "Stats",
            vec![
                field(
                    "total_connections_received",
                    snap.total_connections.to_string(),
                ),
                field("total_commands_processed", snap.commands.to_string()),
                field(
                    "rejected_connections",
                    snap.rejected_connections.to_string(),
                ),
                field("expired_keys", snap.expired_keys.to_string()),
                field("evicted_keys", "0".into()),
                field("total_protocol_errors", snap.protocol_errors.to_string()),
                field(
                    "total_error_replies",
                    shared
                        .stats
                        .total_error_replies
                        .load(Ordering::Relaxed)
                        .to_string(),
                ),
                field("roost_transactions", snap.transactions.to_string()),
                field("roost_transaction_attempts", snap.attempts.to_string()),
                field("roost_conflict_retries", snap.conflict_retries.to_string()),
                field(
                    "roost_failed_transactions",
                    snap.failed_transactions.to_string(),
                ),
                field("roost_watch_aborts", snap.watch_aborts.to_string()),
                field("roost_execabort", snap.exec_aborts.to_string()),
                field("roost_expire_sweeps", snap.expire_sweeps.to_string()),
                field(
                    "roost_expire_sweep_max_keys",
                    snap.expire_sweep_max_keys.to_string(),
                ),
                field(
                    "roost_expire_sweep_batch",
                    shared.store.sweep_batch().to_string(),
                ),
            ],
        );
    }
    if wanted("replication", true) {
        section(
            "Replication",
            vec![
                field("role", "master".into()),
                field("connected_slaves", "0".into()),
                field("master_failover_state", "no-failover".into()),
                field("master_repl_offset", "0".into()),
            ],
        );
    }
    if wanted("commandstats", false) {
        section(
            "Commandstats",
            snap.command_calls
                .iter()
                .map(|(name, calls)| (format!("cmdstat_{name}"), format!("calls={calls}")))
                .collect(),
        );
    }
    if wanted("errorstats", true) {
        section(
            "Errorstats",
            shared
                .stats
                .error_codes()
                .into_iter()
                .map(|(code, n)| (format!("errorstat_{code}"), format!("count={n}")))
                .collect(),
        );
    }
    if wanted("latency", true) {
        let q = &snap.latency_quantiles_us;
        section(
            "Latency",
            vec![
                field("roost_transaction_count", snap.latency_count.to_string()),
                field("roost_transaction_sum_us", snap.latency_sum_us.to_string()),
                field("roost_transaction_p50_us", q[0].to_string()),
                field("roost_transaction_p99_us", q[1].to_string()),
                field("roost_transaction_p999_us", q[2].to_string()),
            ],
        );
    }
    if wanted("keyspace", true) {
        let fields = if snap.keys > 0 {
            vec![field(
                "db0",
                format!(
                    "keys={},expires={},avg_ttl=0",
                    snap.keys, snap.volatile_keys
                ),
            )]
        } else {
            Vec::new()
        };
        section("Keyspace", fields);
    }
    Frame::Verbatim {
        format: *b"txt",
        text: text.into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<Vec<u8>> {
        text.split(' ').map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn getkeys_follows_key_positions() {
        let keys = |line: &str| getkeys(&args(line));
        let bulks = |names: &[&str]| {
            Frame::Array(names.iter().map(|n| Frame::bulk(n.as_bytes())).collect())
        };
        assert_eq!(keys("get k"), bulks(&["k"]));
        assert_eq!(keys("mset a 1 b 2"), bulks(&["a", "b"]));
        assert_eq!(keys("del a b c"), bulks(&["a", "b", "c"]));
        assert_eq!(keys("bitop and d s1 s2"), bulks(&["d", "s1", "s2"]));
        assert_eq!(keys("object encoding k"), bulks(&["k"]));
        assert_eq!(keys("fcall f 2 a b x"), bulks(&["a", "b"]));
        assert_eq!(keys("sort k by w_* store d"), bulks(&["k", "d"]));
        assert_eq!(keys("sort k get store"), bulks(&["k"]));
        assert_eq!(keys("sort_ro k"), bulks(&["k"]));
        assert_eq!(
            keys("nosuch k"),
            Frame::error("ERR Invalid command specified")
        );
        assert_eq!(
            keys("ping x"),
            Frame::error("ERR The command has no key arguments")
        );
        assert_eq!(
            keys("get a b"),
            Frame::error("ERR Invalid number of arguments specified for command")
        );
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(3 << 20), "3.00M");
    }
}

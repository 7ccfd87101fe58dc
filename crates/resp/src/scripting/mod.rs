//! Redis Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT
//! LOAD/EXISTS/FLUSH/KILL, and Lua libraries (FUNCTION LOAD, called with
//! FCALL/FCALL_RO beside the Rust functions of [`crate::functions`]).
//!
//! A script is one command: it runs inside the transaction of its pipeline
//! batch or MULTI/EXEC block, and the commands it calls (`redis.call`) run
//! through the same command executor in that transaction, so a script is
//! atomic and serializable with everything else.
//!
//! Where Roost differs from Redis, on purpose:
//! - A script that raises (an uncaught error: a failing `redis.call`, a
//!   runtime error, the time limit, SCRIPT KILL) applies nothing: its
//!   transaction is aborted and rerun without it (the script's place gets
//!   its error). Redis keeps the writes made before the error. A script that
//!   *returns* an error reply (`redis.error_reply`, `{err=...}`) returned:
//!   its writes apply.
//! - A script may only call commands on the keys it declares (KEYS, or the
//!   keys of an FCALL): those names are the data a call touches, as for the
//!   Rust functions. Keyless commands (KEYS, SCAN, DBSIZE, FLUSHDB...) and
//!   the bounded counters' commands are not allowed from scripts.
//! - The time limit (`lua_time_limit_ms`, Redis's busy threshold, default
//!   5000) stops the script with an error instead of leaving it running
//!   until SCRIPT KILL; SCRIPT KILL also works on any script, since a killed
//!   script applies nothing.
//! - `coroutine` is not available to scripts (the runtime suspends a script
//!   on a coroutine at each command it calls).

mod cjson;
mod lua;
pub(crate) mod sha1;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use thiserror::Error;

use crate::commands::{self, Kind};
use crate::functions::Functions;
use crate::protocol::Frame;
use crate::store::{parse_i64, Op, MAX_KEY_BYTES, NOT_INTEGER};

pub(crate) use lua::run;

/// The most scripts the cache holds, and their total size: SCRIPT LOAD past
/// either is refused (EVAL still runs, uncached).
const MAX_CACHED_SCRIPTS: usize = 10_000;
const MAX_CACHED_BYTES: usize = 64 << 20;
/// The most Lua libraries FUNCTION LOAD keeps.
const MAX_LIBRARIES: usize = 1024;
/// Redis's default `busy-reply-threshold` (`lua-time-limit`).
pub const DEFAULT_TIME_LIMIT_MS: u64 = 5000;

/// A Lua library loaded with FUNCTION LOAD.
#[derive(Debug)]
pub(crate) struct Library {
    pub(crate) name: String,
    pub(crate) code: String,
    /// (name, no-writes, description), sorted by name.
    pub(crate) functions: lua::Registered,
}

/// The server's scripts: the EVAL cache and the Lua libraries, shared by
/// every connection (it lives in [`Functions`], which every connection
/// has).
pub(crate) struct Scripting {
    scripts: Mutex<ScriptCache>,
    libraries: RwLock<Vec<Arc<Library>>>,
    time_limit_ms: AtomicU64,
    /// Scripts running now (SCRIPT KILL answers NOTBUSY when none).
    running: AtomicUsize,
    /// Bumped by SCRIPT KILL: a run that started under another epoch stops.
    kill_epoch: AtomicU64,
}

#[derive(Default)]
struct ScriptCache {
    by_sha: HashMap<String, Arc<[u8]>>,
    bytes: usize,
}

impl Default for Scripting {
    fn default() -> Self {
        Scripting {
            scripts: Mutex::default(),
            libraries: RwLock::default(),
            time_limit_ms: AtomicU64::new(DEFAULT_TIME_LIMIT_MS),
            running: AtomicUsize::new(0),
            kill_epoch: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for Scripting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripting").finish_non_exhaustive()
    }
}

/// Counts a run while it lives.
pub(crate) struct Running<'a>(&'a Scripting);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a library could not be loaded (FUNCTION LOAD); the texts are Redis's.
#[derive(Debug, Error)]
pub(crate) enum LoadError {
    #[error("ERR Missing library metadata")]
    NoShebang,
    #[error("ERR Engine '{0}' not found")]
    Engine(String),
    #[error("ERR Invalid metadata value given: {0}")]
    Metadata(String),
    #[error("ERR Library name was not given")]
    NoName,
    #[error("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long")]
    BadName,
    #[error("ERR Library '{0}' already exists")]
    Exists(String),
    #[error("ERR Function {0} already exists")]
    FunctionExists(String),
    #[error("ERR No functions registered")]
    NoFunctions,
    #[error("ERR at most {MAX_LIBRARIES} libraries can be loaded")]
    TooMany,
    /// The code's own error (compiling or registering), as a reply text.
    #[error("{0}")]
    Code(String),
}

fn valid_function_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= crate::functions::MAX_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Scripting {
    pub(crate) fn set_time_limit(&self, ms: u64) {
        self.time_limit_ms.store(ms.max(1), Ordering::Relaxed);
    }

    pub(crate) fn time_limit(&self) -> Duration {
        Duration::from_millis(self.time_limit_ms.load(Ordering::Relaxed))
    }

    /// SCRIPT KILL and FUNCTION KILL: stops the Lua code running now (it
    /// applies nothing); NOTBUSY when none runs.
    pub(crate) fn kill(&self) -> Frame {
        if self.running.load(Ordering::SeqCst) == 0 {
            Frame::error("NOTBUSY No scripts in execution right now.")
        } else {
            self.kill_epoch.fetch_add(1, Ordering::SeqCst);
            Frame::ok()
        }
    }

    fn kill_epoch(&self) -> u64 {
        self.kill_epoch.load(Ordering::SeqCst)
    }

    fn enter(&self) -> Running<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        Running(self)
    }

    pub(crate) fn script(&self, sha: &str) -> Option<Arc<[u8]>> {
        self.scripts
            .lock()
            .expect("script cache")
            .by_sha
            .get(sha)
            .cloned()
    }

    /// Caches `body` under its SHA-1; `false` when the cache is full.
    fn cache(&self, sha: &str, body: &Arc<[u8]>) -> bool {
        let mut cache = self.scripts.lock().expect("script cache");
        if cache.by_sha.contains_key(sha) {
            return true;
        }
        if cache.by_sha.len() >= MAX_CACHED_SCRIPTS || cache.bytes + body.len() > MAX_CACHED_BYTES {
            return false;
        }
        cache.bytes += body.len();
        cache.by_sha.insert(sha.to_owned(), Arc::clone(body));
        true
    }

    /// `SCRIPT <subcommand> ...`'s reply.
    pub(crate) fn script_command(&self, args: &[Vec<u8>]) -> Frame {
        let sub = args[1].to_ascii_lowercase();
        match (sub.as_slice(), args.len()) {
            (b"load", 3) => {
                if let Err(error) = lua::check_script(&args[2]) {
                    return error;
                }
                let sha = sha1::sha1_hex(&args[2]);
                if self.cache(&sha, &Arc::from(args[2].as_slice())) {
                    Frame::bulk(sha)
                } else {
                    Frame::error("ERR the script cache is full (SCRIPT FLUSH empties it)")
                }
            }
            (b"exists", n) if n >= 3 => {
                let cache = self.scripts.lock().expect("script cache");
                Frame::Array(
                    args[2..]
                        .iter()
                        .map(|sha| {
                            let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                            Frame::Integer(i64::from(cache.by_sha.contains_key(&sha)))
                        })
                        .collect(),
                )
            }
            (b"flush", 2) => self.flush_scripts(),
            (b"flush", 3)
                if args[2].eq_ignore_ascii_case(b"async") || args[2].eq_ignore_ascii_case(b"sync") =>
            {
                self.flush_scripts()
            }
            (b"kill", 2) => self.kill(),
            (b"help", 2) => Frame::Array(
                [
                    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "EXISTS <sha1> [<sha1> ...]",
                    "    Return information about the existence of the scripts in the script cache.",
                    "FLUSH [ASYNC|SYNC]",
                    "    Flush the Lua scripts cache.",
                    "KILL",
                    "    Kill the currently executing Lua script (it applies nothing).",
                    "LOAD <script>",
                    "    Load a script into the scripts cache without executing it.",
                ]
                .into_iter()
                .map(|line| Frame::Simple(line.into()))
                .collect(),
            ),
            (b"load" | b"exists" | b"flush" | b"kill" | b"help", _) => Frame::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try SCRIPT HELP.",
                String::from_utf8_lossy(&args[1])
            )),
            _ => Frame::error(format!(
                "ERR unknown subcommand '{}'. Try SCRIPT HELP.",
                String::from_utf8_lossy(&args[1])
            )),
        }
    }

    fn flush_scripts(&self) -> Frame {
        let mut cache = self.scripts.lock().expect("script cache");
        *cache = ScriptCache::default();
        Frame::ok()
    }

    /// FUNCTION LOAD [REPLACE] code: the library's name. `rust_names`: the
    /// Rust functions' names, which a Lua function may not take.
    pub(crate) fn load_library(
        &self,
        code: &[u8],
        replace: bool,
        rust_names: &dyn Fn(&str) -> bool,
    ) -> Result<String, LoadError> {
        let text = std::str::from_utf8(code).map_err(|_| LoadError::NoShebang)?;
        let first_line = text.lines().next().unwrap_or("");
        let Some(shebang) = first_line.strip_prefix("#!") else {
            return Err(LoadError::NoShebang);
        };
        let mut parts = shebang.split(' ').filter(|p| !p.is_empty());
        let engine = parts.next().unwrap_or("");
        if !engine.eq_ignore_ascii_case("lua") {
            return Err(LoadError::Engine(engine.to_owned()));
        }
        let mut name = None;
        for part in parts {
            match part.strip_prefix("name=") {
                Some(n) => name = Some(n.to_owned()),
                None => return Err(LoadError::Metadata(part.to_owned())),
            }
        }
        let name = name.ok_or(LoadError::NoName)?;
        if !valid_function_name(&name) {
            return Err(LoadError::BadName);
        }
        let functions = lua::load_library(code, self.time_limit()).map_err(|e| match e {
            Frame::Error(text) => LoadError::Code(text),
            other => LoadError::Code(format!("ERR {other:?}")),
        })?;
        if functions.is_empty() {
            return Err(LoadError::NoFunctions);
        }
        let mut libraries = self.libraries.write().expect("libraries");
        let existing = libraries.iter().position(|l| l.name == name);
        if existing.is_some() && !replace {
            return Err(LoadError::Exists(name));
        }
        for (function, _, _) in &functions {
            let taken = rust_names(function)
                || libraries
                    .iter()
                    .any(|l| l.name != name && l.functions.iter().any(|(f, _, _)| f == function));
            if taken {
                return Err(LoadError::FunctionExists(function.clone()));
            }
        }
        let library = Arc::new(Library {
            name: name.clone(),
            code: text.to_owned(),
            functions,
        });
        match existing {
            Some(i) => libraries[i] = library,
            None if libraries.len() >= MAX_LIBRARIES => return Err(LoadError::TooMany),
            None => libraries.push(library),
        }
        Ok(name)
    }

    /// FUNCTION DELETE: whether the library existed.
    pub(crate) fn delete_library(&self, name: &[u8]) -> bool {
        let mut libraries = self.libraries.write().expect("libraries");
        let before = libraries.len();
        libraries.retain(|l| l.name.as_bytes() != name);
        libraries.len() != before
    }

    /// FUNCTION FLUSH: drops every Lua library (the Rust functions stay).
    pub(crate) fn flush_libraries(&self) {
        self.libraries.write().expect("libraries").clear();
    }

    pub(crate) fn libraries(&self) -> Vec<Arc<Library>> {
        self.libraries.read().expect("libraries").clone()
    }

    /// The Lua function `name`: its library and whether it is no-writes.
    fn function(&self, name: &[u8]) -> Option<(Arc<Library>, bool)> {
        let libraries = self.libraries.read().expect("libraries");
        libraries.iter().find_map(|library| {
            library
                .functions
                .iter()
                .find(|(f, _, _)| f.as_bytes() == name)
                .map(|(_, no_writes, _)| (Arc::clone(library), *no_writes))
        })
    }
}

/// What a run executes.
#[derive(Debug)]
pub(crate) enum Source {
    /// An EVAL body, with its SHA-1 (the name its errors give).
    Eval { sha: String, body: Arc<[u8]> },
    /// Function `name` of a Lua library.
    Function { library: Arc<Library>, name: String },
}

/// A parsed EVAL/EVALSHA/FCALL of a Lua function: ready to run.
#[derive(Debug)]
pub(crate) struct ScriptCall {
    source: Source,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    /// EVAL_RO, EVALSHA_RO, `no-writes` (a shebang flag or a function's):
    /// write commands are refused.
    read_only: bool,
    registry: Arc<Scripting>,
}

impl ScriptCall {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        self.keys.first().map(Vec::as_slice)
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        self.keys.iter().chain(&self.args).map(Vec::len).sum()
    }
}

/// A call's keys and its arguments after them.
type KeysAndArgs = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// `numkeys key... arg...` (from `args[at]`) split into keys and arguments,
/// or Redis's error.
fn split_keys(args: &mut [Vec<u8>], at: usize, bad_numkeys: &str) -> Result<KeysAndArgs, Frame> {
    let numkeys = parse_i64(&args[at]).ok_or_else(|| Frame::error(bad_numkeys))?;
    let rest = &mut args[at + 1..];
    if numkeys < 0 {
        return Err(Frame::error("ERR Number of keys can't be negative"));
    }
    if numkeys as u64 > rest.len() as u64 {
        return Err(Frame::error(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let numkeys = numkeys as usize;
    if rest[..numkeys].iter().any(|k| k.len() > MAX_KEY_BYTES) {
        return Err(Frame::error(format!(
            "ERR key is longer than {MAX_KEY_BYTES} bytes"
        )));
    }
    let keys = rest[..numkeys].iter_mut().map(std::mem::take).collect();
    let args = rest[numkeys..].iter_mut().map(std::mem::take).collect();
    Ok((keys, args))
}

/// Whether an EVAL body's shebang (`#!lua flags=no-writes,...`) flags it
/// read-only; an unknown engine or flag is Redis's error.
fn shebang_no_writes(body: &[u8]) -> Result<bool, Frame> {
    if !body.starts_with(b"#!") {
        return Ok(false);
    }
    let line = body.split(|&b| b == b'\n').next().unwrap_or(b"");
    let line = String::from_utf8_lossy(&line[2..]).trim_end().to_owned();
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if engine != "lua" {
        return Err(Frame::error(format!(
            "ERR Unexpected engine in script shebang: {engine}"
        )));
    }
    let mut no_writes = false;
    for part in parts {
        let Some(flags) = part.strip_prefix("flags=") else {
            return Err(Frame::error(format!(
                "ERR Unknown lua shebang option: {part}"
            )));
        };
        for flag in flags.split(',').filter(|f| !f.is_empty()) {
            match flag {
                "no-writes" => no_writes = true,
                "allow-oom" | "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => {
                    return Err(Frame::error(format!(
                        "ERR Unexpected flag in script shebang: {other}"
                    )))
                }
            }
        }
    }
    Ok(no_writes)
}

/// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO (arity checked) as an op.
pub(crate) fn parse_eval(functions: &Functions, name: &str, mut args: Vec<Vec<u8>>) -> Op {
    let registry = functions.scripting();
    let body: Arc<[u8]> = if name.starts_with("evalsha") {
        let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        match registry.script(&sha) {
            Some(body) => body,
            None => {
                return Op::Reply(Frame::error(
                    "NOSCRIPT No matching script. Please use EVAL.",
                ))
            }
        }
    } else {
        Arc::from(std::mem::take(&mut args[1]))
    };
    let no_writes = match shebang_no_writes(&body) {
        Ok(no_writes) => no_writes,
        Err(error) => return Op::Reply(error),
    };
    let (keys, script_args) = match split_keys(&mut args, 2, NOT_INTEGER) {
        Ok(split) => split,
        Err(error) => return Op::Reply(error),
    };
    let sha = sha1::sha1_hex(&body);
    // EVAL caches its body, as Redis does (EVALSHA may name it next).
    registry.cache(&sha, &body);
    Op::Script(Arc::new(ScriptCall {
        source: Source::Eval { sha, body },
        keys,
        args: script_args,
        read_only: no_writes || name.ends_with("_ro"),
        registry: Arc::clone(registry),
    }))
}

/// FCALL/FCALL_RO of a Lua library's function, if `args[1]` names one.
pub(crate) fn parse_fcall(
    functions: &Functions,
    read_only: bool,
    args: &mut [Vec<u8>],
) -> Option<Op> {
    let registry = functions.scripting();
    let (library, no_writes) = registry.function(&args[1])?;
    let name = String::from_utf8_lossy(&args[1]).into_owned();
    let (keys, script_args) = match split_keys(args, 2, "ERR Bad number of keys provided") {
        Ok(split) => split,
        Err(error) => return Some(Op::Reply(error)),
    };
    if read_only && !no_writes {
        return Some(Op::Reply(Frame::error(
            "ERR Can not execute a script with write flag using *_ro command.",
        )));
    }
    Some(Op::Script(Arc::new(ScriptCall {
        source: Source::Function { library, name },
        keys,
        args: script_args,
        read_only: no_writes,
        registry: Arc::clone(registry),
    })))
}

/// A command a script calls, as the op it runs, or the error `redis.call`
/// raises (Redis 7's texts where Redis has one).
fn command_op(call: &ScriptCall, args: Vec<Vec<u8>>) -> Result<Op, Frame> {
    let spec = commands::lookup(&args[0])
        .ok_or_else(|| Frame::error("ERR Unknown Redis command called from script"))?;
    let not_allowed = spec.kind != Kind::Data
        || spec.name.starts_with("eval")
        || spec.name.starts_with("fcall")
        || spec.name.starts_with("bc.")
        // Redis's `noscript` commands (BLMPOP is not one).
        || matches!(
            spec.name,
            "blpop" | "brpop" | "blmove" | "brpoplpush" | "bzpopmin" | "bzpopmax"
        );
    if not_allowed {
        return Err(Frame::error(
            "ERR This Redis command is not allowed from script",
        ));
    }
    if !commands::arity_ok(spec, args.len()) {
        return Err(Frame::error(
            "ERR Wrong number of args calling Redis command from script",
        ));
    }
    if spec.write && call.read_only {
        return Err(Frame::error(
            "ERR Write commands are not allowed from read-only scripts.",
        ));
    }
    // Keys the script did not declare, and commands on no key (DBSIZE,
    // KEYS, RANDOMKEY), are served as Redis serves them outside cluster
    // mode: the script is one transaction, and it enters whatever reactor
    // a key lives in (on a cluster, acquiring it). The declared keys only
    // say where the script runs first.
    // No FCALL/EVAL reaches here: the functions are never consulted.
    static NONE: OnceLock<Functions> = OnceLock::new();
    Ok(commands::parse_op(
        spec,
        args,
        NONE.get_or_init(Functions::new),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<Vec<u8>> {
        text.split(' ').map(|s| s.as_bytes().to_vec()).collect()
    }

    fn error(op: Op) -> String {
        match op {
            Op::Reply(Frame::Error(e)) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn eval_argument_errors_follow_redis() {
        let functions = Functions::examples();
        assert_eq!(
            error(parse_eval(&functions, "eval", args("eval return 2 a"))),
            "ERR Number of keys can't be greater than number of args"
        );
        assert_eq!(
            error(parse_eval(&functions, "eval", args("eval return -1"))),
            "ERR Number of keys can't be negative"
        );
        assert_eq!(
            error(parse_eval(&functions, "eval", args("eval return x"))),
            NOT_INTEGER
        );
        assert_eq!(
            error(parse_eval(&functions, "evalsha", args("evalsha ffff 0"))),
            "NOSCRIPT No matching script. Please use EVAL."
        );
        assert!(matches!(
            parse_eval(&functions, "eval", args("eval return 1 a b c")),
            Op::Script(_)
        ));
    }

    #[test]
    fn shebangs() {
        assert_eq!(shebang_no_writes(b"return 1"), Ok(false));
        assert_eq!(shebang_no_writes(b"#!lua\nreturn 1"), Ok(false));
        assert_eq!(
            shebang_no_writes(b"#!lua flags=no-writes\nreturn 1"),
            Ok(true)
        );
        assert!(shebang_no_writes(b"#!js\nreturn 1").is_err());
        assert!(shebang_no_writes(b"#!lua flags=bogus\n").is_err());
    }

    #[test]
    fn library_metadata_errors() {
        let scripting = Scripting::default();
        let none = |_: &str| false;
        let load = |code: &str| scripting.load_library(code.as_bytes(), false, &none);
        assert!(matches!(load("return 1"), Err(LoadError::NoShebang)));
        assert!(matches!(load("#!js name=x\n"), Err(LoadError::Engine(_))));
        assert!(matches!(load("#!lua\n"), Err(LoadError::NoName)));
        assert!(matches!(
            load("#!lua name=x\nlocal a = 1"),
            Err(LoadError::NoFunctions)
        ));
        assert!(matches!(
            load("#!lua name=x\nlocal ="),
            Err(LoadError::Code(_))
        ));
        assert_eq!(
            load("#!lua name=lib\nredis.register_function('f', function() return 1 end)").unwrap(),
            "lib"
        );
        assert!(matches!(
            load("#!lua name=lib\nredis.register_function('g', function() end)"),
            Err(LoadError::Exists(_))
        ));
        assert!(matches!(
            load("#!lua name=other\nredis.register_function('f', function() end)"),
            Err(LoadError::FunctionExists(_))
        ));
        assert!(scripting.function(b"f").is_some());
        assert!(scripting.delete_library(b"lib"));
        assert!(scripting.function(b"f").is_none());
    }

    #[test]
    fn script_cache() {
        let scripting = Scripting::default();
        let load = |body: &str| {
            vec![
                b"script".to_vec(),
                b"load".to_vec(),
                body.as_bytes().to_vec(),
            ]
        };
        let reply = scripting.script_command(&load("return 1"));
        assert_eq!(
            reply,
            Frame::bulk("e0e1f9fabfc9d4800c877a703b823ac0578ff8db")
        );
        assert_eq!(
            scripting.script_command(&args(
                "script exists e0e1f9fabfc9d4800c877a703b823ac0578ff8db ff"
            )),
            Frame::Array(vec![Frame::Integer(1), Frame::Integer(0)])
        );
        assert!(matches!(
            scripting.script_command(&load("return (")),
            Frame::Error(e) if e.starts_with("ERR Error compiling script")
        ));
        assert_eq!(scripting.script_command(&args("script flush")), Frame::ok());
        assert_eq!(
            scripting.script_command(&args("script kill")),
            Frame::error("NOTBUSY No scripts in execution right now.")
        );
    }
}

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
//! - A script past the time limit (`lua_time_limit_ms`, Redis's
//!   `busy-reply-threshold`/`lua-time-limit`, default 5000) keeps running,
//!   as in Redis, while every other client gets Redis's `BUSY` error (but
//!   for SCRIPT KILL, FUNCTION KILL, FUNCTION STATS and the transaction
//!   commands MULTI, DISCARD, WATCH, UNWATCH): the script gives its thread
//!   back every few milliseconds ([`lua`]'s hook yields) so the others are
//!   answered. SCRIPT KILL (an EVAL) and FUNCTION KILL (a function) stop
//!   it, even one that wrote (Redis refuses those with UNKILLABLE): a killed
//!   script applies nothing. A script is stopped anyway once it ran
//!   [`HARD_LIMIT`], so none runs without bound.
//! - `coroutine` is not available to scripts (the runtime suspends a script
//!   on a coroutine at each command it calls).

mod bit;
mod cjson;
mod cmsgpack;
mod lua;
pub(crate) mod sha1;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

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
/// A script still running after this long is stopped (it applies nothing),
/// whatever the time limit: past the limit it only makes others wait.
pub const HARD_LIMIT: Duration = Duration::from_secs(300);
/// FUNCTION LOAD's time limit for a library's code (Redis's).
pub const LOAD_TIME_LIMIT: Duration = Duration::from_millis(500);
/// Redis's BUSY errors, while an EVAL and while a function runs long.
pub(crate) const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
pub(crate) const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
/// The most arguments FUNCTION STATS shows of a running call.
const MAX_STATS_ARGS: usize = 32;

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
    /// The runs past their time limit now: while there is one, other
    /// clients get BUSY; SCRIPT KILL and FUNCTION KILL stop them.
    busy: Mutex<Vec<BusyRun>>,
    /// `busy.len()`, read by every command of every connection.
    busy_count: AtomicUsize,
}

/// One run of a script, as its hook and SCRIPT/FUNCTION KILL see it.
#[derive(Debug, Default)]
pub(crate) struct RunState {
    /// Set by SCRIPT KILL or FUNCTION KILL: the hook stops the run.
    killed: AtomicBool,
}

impl RunState {
    pub(crate) fn killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }
}

/// A run past its time limit.
struct BusyRun {
    state: Arc<RunState>,
    /// The function's name; `None`: an EVAL.
    function: Option<String>,
    /// The call, for FUNCTION STATS.
    command: Vec<Vec<u8>>,
    started: Instant,
}

/// Keeps a run in the busy list while it lives.
pub(crate) struct BusyGuard<'a> {
    registry: &'a Scripting,
    state: Arc<RunState>,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        let mut busy = self.registry.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.retain(|run| !Arc::ptr_eq(&run.state, &self.state));
        self.registry
            .busy_count
            .store(busy.len(), Ordering::Release);
    }
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
            busy: Mutex::default(),
            busy_count: AtomicUsize::new(0),
        }
    }
}

impl std::fmt::Debug for Scripting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripting").finish_non_exhaustive()
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
    #[error("ERR Invalid metadata value, name argument was given multiple times")]
    NameTwice,
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

/// FUNCTION RESTORE's policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestorePolicy {
    Flush,
    Append,
    Replace,
}

/// FUNCTION DUMP's payload: this magic, per library its code's length
/// (u64 LE) and code, the format's version (u16 LE), and the first bytes
/// of the SHA-1 (hex) of all that.
const DUMP_MAGIC: &[u8] = b"ROOSTFN";
const DUMP_VERSION: u16 = 1;
const DUMP_CHECKSUM_BYTES: usize = 16;

/// The libraries' codes in a dump; `None` when it is not one of ours, of
/// this version, with a right checksum.
fn parse_dump(payload: &[u8]) -> Option<Vec<&[u8]>> {
    let body_len = payload.len().checked_sub(DUMP_CHECKSUM_BYTES)?;
    let (body, checksum) = payload.split_at(body_len);
    if sha1::sha1_hex(body).as_bytes()[..DUMP_CHECKSUM_BYTES] != *checksum {
        return None;
    }
    let libraries_end = body.len().checked_sub(2)?;
    let (libraries, version) = body.split_at(libraries_end);
    if u16::from_le_bytes([version[0], version[1]]) != DUMP_VERSION {
        return None;
    }
    let mut rest = libraries.strip_prefix(DUMP_MAGIC)?;
    let mut codes = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(8)?;
        let len = usize::try_from(u64::from_le_bytes(len.try_into().ok()?)).ok()?;
        let (code, tail) = tail.split_at_checked(len)?;
        codes.push(code);
        rest = tail;
        if codes.len() > MAX_LIBRARIES {
            return None;
        }
    }
    Some(codes)
}

/// Whether `library`'s functions are free among `libraries` (but its own
/// name's) and the Rust functions; function names are case-insensitive.
fn check_collisions(
    libraries: &[Arc<Library>],
    library: &Library,
    rust_names: &dyn Fn(&str) -> bool,
) -> Result<(), LoadError> {
    for (function, _, _) in &library.functions {
        let taken = rust_names(function)
            || libraries.iter().any(|l| {
                l.name != library.name
                    && l.functions
                        .iter()
                        .any(|(f, _, _)| f.eq_ignore_ascii_case(function))
            });
        if taken {
            return Err(LoadError::FunctionExists(function.clone()));
        }
    }
    Ok(())
}

/// The shebang's metadata after the engine, split as Redis's
/// `sdssplitargs` splits it (quotes group, and are dropped).
fn split_metadata(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.get_or_insert_with(String::new).push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                current.get_or_insert_with(String::new);
            }
            None if c.is_whitespace() => {
                if let Some(part) = current.take() {
                    parts.push(part);
                }
            }
            None => current.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(part) = current {
        parts.push(part);
    }
    parts
}

/// A library's code compiled and run (under [`LOAD_TIME_LIMIT`]): its
/// name and functions, or Redis's error.
fn compile_library(code: &[u8]) -> Result<Library, LoadError> {
    let text = std::str::from_utf8(code).map_err(|_| LoadError::NoShebang)?;
    let first_line = text.lines().next().unwrap_or("");
    let Some(shebang) = first_line.strip_prefix("#!") else {
        return Err(LoadError::NoShebang);
    };
    let (engine, metadata) = shebang.split_once(' ').unwrap_or((shebang, ""));
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(LoadError::Engine(engine.to_owned()));
    }
    let mut name = None;
    for part in split_metadata(metadata) {
        match part.strip_prefix("name=") {
            Some(_) if name.is_some() => return Err(LoadError::NameTwice),
            Some(n) => name = Some(n.to_owned()),
            None => return Err(LoadError::Metadata(part)),
        }
    }
    let name = name.ok_or(LoadError::NoName)?;
    if !valid_function_name(&name) {
        return Err(LoadError::BadName);
    }
    let functions = lua::load_library(code, LOAD_TIME_LIMIT).map_err(|e| match e {
        Frame::Error(text) => LoadError::Code(text),
        other => LoadError::Code(format!("ERR {other:?}")),
    })?;
    if functions.is_empty() {
        return Err(LoadError::NoFunctions);
    }
    Ok(Library {
        name,
        code: text.to_owned(),
        functions,
    })
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

    /// SCRIPT KILL (`eval`) and FUNCTION KILL: stops the runs of that kind
    /// past their time limit (they apply nothing); Redis's errors when none
    /// runs, or only runs of the other kind.
    pub(crate) fn kill(&self, eval: bool) -> Frame {
        let busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let mut killed = false;
        for run in busy.iter().filter(|run| run.function.is_none() == eval) {
            run.state.killed.store(true, Ordering::Relaxed);
            killed = true;
        }
        match (killed, busy.first()) {
            (true, _) => Frame::ok(),
            (false, None) => Frame::error("NOTBUSY No scripts in execution right now."),
            (false, Some(_)) if eval => Frame::error(BUSY_FUNCTION),
            (false, Some(_)) => Frame::error(BUSY_EVAL),
        }
    }

    /// Whether a run is past its time limit now (one atomic load).
    pub(crate) fn is_busy(&self) -> bool {
        self.busy_count.load(Ordering::Acquire) != 0
    }

    /// The BUSY error every other client gets while a run is past its time
    /// limit; `None` when none is.
    pub(crate) fn busy_error(&self) -> Option<Frame> {
        if self.busy_count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let run = busy.first()?;
        Some(Frame::error(if run.function.is_some() {
            BUSY_FUNCTION
        } else {
            BUSY_EVAL
        }))
    }

    /// Puts a run in the busy list until the guard drops.
    pub(crate) fn enter_busy(&self, state: &Arc<RunState>, call: &ScriptCall) -> BusyGuard<'_> {
        let (function, mut command) = match &call.source {
            Source::Eval { sha, .. } => (None, vec![b"eval".to_vec(), sha.as_bytes().to_vec()]),
            Source::Function { name, .. } => (
                Some(name.clone()),
                vec![
                    if call.read_only {
                        &b"fcall_ro"[..]
                    } else {
                        b"fcall"
                    }
                    .to_vec(),
                    name.as_bytes().to_vec(),
                ],
            ),
        };
        command.push(call.keys.len().to_string().into_bytes());
        command.extend(
            call.keys
                .iter()
                .chain(&call.args)
                .take(MAX_STATS_ARGS)
                .cloned(),
        );
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.push(BusyRun {
            state: Arc::clone(state),
            function,
            command,
            started: Instant::now(),
        });
        self.busy_count.store(busy.len(), Ordering::Release);
        BusyGuard {
            registry: self,
            state: Arc::clone(state),
        }
    }

    /// FUNCTION STATS: the run past its time limit (`running_script`) and
    /// the Lua libraries' counts.
    pub(crate) fn stats(&self) -> Frame {
        let running = {
            let busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            busy.first().map_or(Frame::Null, |run| {
                let name = run.function.clone().unwrap_or_default();
                Frame::Map(vec![
                    (Frame::bulk("name"), Frame::bulk(name)),
                    (
                        Frame::bulk("command"),
                        Frame::Array(run.command.iter().cloned().map(Frame::Bulk).collect()),
                    ),
                    (
                        Frame::bulk("duration_ms"),
                        Frame::Integer(
                            i64::try_from(run.started.elapsed().as_millis()).unwrap_or(i64::MAX),
                        ),
                    ),
                ])
            })
        };
        let libraries = self.libraries();
        let functions: usize = libraries.iter().map(|l| l.functions.len()).sum();
        Frame::Map(vec![
            (Frame::bulk("running_script"), running),
            (
                Frame::bulk("engines"),
                Frame::Map(vec![(
                    Frame::bulk("LUA"),
                    Frame::Map(vec![
                        (
                            Frame::bulk("libraries_count"),
                            Frame::Integer(libraries.len() as i64),
                        ),
                        (
                            Frame::bulk("functions_count"),
                            Frame::Integer(functions as i64),
                        ),
                    ]),
                )]),
            ),
        ])
    }

    /// How many scripts the cache holds (INFO's `number_of_cached_scripts`).
    pub(crate) fn cached_scripts(&self) -> usize {
        self.scripts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_sha
            .len()
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
            (b"kill", 2) => self.kill(true),
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
        let library = Arc::new(compile_library(code)?);
        let name = library.name.clone();
        let mut libraries = self.libraries.write().unwrap_or_else(|e| e.into_inner());
        let existing = libraries.iter().position(|l| l.name == name);
        if existing.is_some() && !replace {
            return Err(LoadError::Exists(name));
        }
        check_collisions(&libraries, &library, rust_names)?;
        match existing {
            Some(i) => libraries[i] = library,
            None if libraries.len() >= MAX_LIBRARIES => return Err(LoadError::TooMany),
            None => libraries.push(library),
        }
        Ok(name)
    }

    /// FUNCTION DUMP: every Lua library's code, with a version and a
    /// checksum (Roost's own format: RESTORE reads it back, not Redis's).
    pub(crate) fn dump(&self) -> Vec<u8> {
        let libraries = self.libraries();
        let mut out = DUMP_MAGIC.to_vec();
        for library in &libraries {
            out.extend_from_slice(&(library.code.len() as u64).to_le_bytes());
            out.extend_from_slice(library.code.as_bytes());
        }
        out.extend_from_slice(&DUMP_VERSION.to_le_bytes());
        let digest = sha1::sha1_hex(&out);
        out.extend_from_slice(&digest.as_bytes()[..DUMP_CHECKSUM_BYTES]);
        out
    }

    /// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]: all the payload's
    /// libraries or none; Redis's errors.
    pub(crate) fn restore(
        &self,
        payload: &[u8],
        policy: RestorePolicy,
        rust_names: &dyn Fn(&str) -> bool,
    ) -> Result<(), Frame> {
        let codes = parse_dump(payload)
            .ok_or_else(|| Frame::error("ERR DUMP payload version or checksum are wrong"))?;
        let mut restored: Vec<Arc<Library>> = Vec::with_capacity(codes.len());
        for code in codes {
            let library = compile_library(code).map_err(|e| Frame::error(e.to_string()))?;
            if restored.iter().any(|l| l.name == library.name) {
                return Err(Frame::error(format!(
                    "ERR Library {} already exists",
                    library.name
                )));
            }
            restored.push(Arc::new(library));
        }
        let mut libraries = self.libraries.write().unwrap_or_else(|e| e.into_inner());
        let mut next: Vec<Arc<Library>> = match policy {
            RestorePolicy::Flush => Vec::new(),
            RestorePolicy::Append | RestorePolicy::Replace => libraries.clone(),
        };
        for library in restored {
            match next.iter().position(|l| l.name == library.name) {
                Some(_) if policy == RestorePolicy::Append => {
                    return Err(Frame::error(format!(
                        "ERR Library {} already exists",
                        library.name
                    )))
                }
                Some(i) => {
                    next.remove(i);
                }
                None => {}
            }
            check_collisions(&next, &library, rust_names).map_err(|e| match e {
                LoadError::FunctionExists(f) => {
                    Frame::error(format!("ERR Function {f} already exists"))
                }
                other => Frame::error(other.to_string()),
            })?;
            next.push(library);
        }
        if next.len() > MAX_LIBRARIES {
            return Err(Frame::error(LoadError::TooMany.to_string()));
        }
        *libraries = next;
        Ok(())
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
    /// (Function names are case-insensitive, as Redis's: its registered
    /// name comes back.)
    fn function(&self, name: &[u8]) -> Option<(Arc<Library>, bool, String)> {
        let libraries = self.libraries.read().unwrap_or_else(|e| e.into_inner());
        libraries.iter().find_map(|library| {
            library
                .functions
                .iter()
                .find(|(f, _, _)| f.as_bytes().eq_ignore_ascii_case(name))
                .map(|(f, no_writes, _)| (Arc::clone(library), *no_writes, f.clone()))
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
    let (library, no_writes, name) = registry.function(&args[1])?;
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
    // Connection commands a script may call, as Redis serves them there.
    let name = args[0].to_ascii_lowercase();
    match (name.as_slice(), args.len()) {
        (b"ping", 1) => return Ok(Op::Reply(Frame::Simple("PONG".into()))),
        (b"ping" | b"echo", 2) => return Ok(Op::Reply(Frame::Bulk(args[1].clone()))),
        (b"ping" | b"echo", _) => {
            return Err(Frame::error(
                "ERR Wrong number of args calling Redis command from script",
            ))
        }
        (b"time", 1) => return Ok(Op::Reply(crate::admin::time())),
        // Redis's `noscript` commands Roost does not serve either.
        (
            b"cluster" | b"client" | b"shutdown" | b"save" | b"bgsave" | b"multi" | b"exec"
            | b"watch" | b"subscribe" | b"monitor",
            _,
        ) => {
            return Err(Frame::error(
                "ERR This Redis command is not allowed from script",
            ))
        }
        _ => {}
    }
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

/// Whether a command is served while a script is past its time limit
/// (Redis's `allow-busy` commands); the others get BUSY.
pub(crate) fn allowed_while_busy(name: &str, args: &[Vec<u8>]) -> bool {
    let sub = |expected: &[&[u8]]| {
        args.get(1)
            .is_some_and(|a| expected.iter().any(|e| a.eq_ignore_ascii_case(e)))
    };
    match name {
        "auth" | "hello" | "multi" | "discard" | "watch" | "unwatch" | "quit" | "reset"
        | "shutdown" => true,
        "script" => sub(&[b"kill"]),
        "function" => sub(&[b"kill", b"stats"]),
        _ => false,
    }
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
        assert_eq!(scripting.function(b"F").map(|f| f.2), Some("f".to_owned()));
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

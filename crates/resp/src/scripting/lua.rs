//! The Lua side of scripting: a sandboxed Lua 5.1 state per run, Redis's
//! `redis` and `cjson` tables, the conversions between Lua values and
//! replies, the time limit, and the driver that runs a script inside its
//! transaction.
//!
//! Why a coroutine: a command a script calls (`redis.call`) runs inside the
//! transaction, which is asynchronous (a key may live on a reactor that is
//! reached through a call). So the script runs in a Lua coroutine, and
//! `redis.call` yields the command out to [`run`], which awaits it and
//! resumes the script with the reply. Lua 5.1 cannot yield across `pcall`,
//! so the sandbox's `pcall`/`xpcall` are rebuilt on coroutines (they pass
//! yields through): `pcall(redis.call, ...)` works as in Redis. A command
//! called from a metamethod, an iterator or a `table.sort`/`string.gsub`
//! callback cannot yield (Lua 5.1's C-call boundary) and gets Lua's error.
//!
//! Why a state per script, never shared by two runs at once: no script
//! sees another's leftovers (globals, modified library tables), the memory
//! limit and time limit are the run's own, and runs interleaving on one
//! reactor thread (one awaiting a command while another runs) cannot meet.
//! Setting a state up and compiling the body cost several times a short
//! script's run, so an EVAL state that returned normally is kept on its
//! thread ([`PREPARED`]) for the next run of the *same* script: at most
//! that script meets its own leftovers (a library table it modified, which
//! Redis 7 would have refused). A run that raised or was stopped drops its
//! state. FCALL builds a state per run.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{ChunkMode, Function, Lua, LuaOptions, MultiValue, StdLib, Table, ThreadStatus, Value};
use roost_reactor::ReactorError;

use super::{sha1::sha1_hex, RunState, ScriptCall, Source};
use crate::protocol::{format_double, Frame};
use crate::store::Tx;

/// The most memory one run's Lua state may allocate: a script building a
/// huge string or table gets Lua's "not enough memory" error.
const MEMORY_LIMIT_BYTES: usize = 256 << 20;
/// How often (in Lua VM instructions) the time limit is checked.
const HOOK_EVERY_INSTRUCTIONS: c_int = 1000;
/// The deepest table a script's reply may nest (cyclic tables included).
const MAX_REPLY_DEPTH: usize = 64;

/// What the time-limit hook checks, for the run resumed on this thread now.
/// Set around each resume and cleared after it: runs interleave on a reactor
/// thread only between resumes, at their awaits.
struct Guard {
    /// From then on the hook yields (where Lua can), so the driver gives
    /// the thread back to the executor: the run is past its time limit.
    pause_at: Instant,
    /// Past this the run is stopped ([`HARD_LIMIT`](super::HARD_LIMIT),
    /// or FUNCTION LOAD's limit).
    stop_at: Instant,
    /// The run's state, whose `killed` SCRIPT KILL sets; valid while set
    /// (the run holds an `Arc` to it).
    state: *const RunState,
}

/// Why a run was stopped from outside the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    TimeLimit,
    Killed,
}

thread_local! {
    static GUARD: Cell<Option<Guard>> = const { Cell::new(None) };
    static STOPPED: Cell<Option<Stop>> = const { Cell::new(None) };
    /// Set by the hook when it yields (the run is past its time limit).
    static PAUSED: Cell<bool> = const { Cell::new(false) };
    /// EVAL states ready for another run of their script.
    static PREPARED: RefCell<Kept> = RefCell::new(Kept::default());
}

/// The EVAL states kept on a thread, by their script's SHA-1, and how many
/// (at most [`MAX_PREPARED_PER_THREAD`]).
#[derive(Default)]
struct Kept {
    by_sha: HashMap<String, Vec<Prepared>>,
    count: usize,
}

/// EVAL states kept per thread, all scripts together.
const MAX_PREPARED_PER_THREAD: usize = 256;

/// A sandbox with one EVAL body compiled in it and its globals protected.
struct Prepared {
    sha: String,
    lua: Lua,
    runner: Function,
    main: Function,
    /// The table behind the protected globals (where KEYS and ARGV go).
    globals: Table,
}

impl Prepared {
    fn new(sha: &str, body: &[u8]) -> Result<Prepared, Frame> {
        let setup_error = |e: mlua::Error| Frame::error(format!("ERR {}", error_text(&e)));
        let (lua, runner) = sandbox().map_err(setup_error)?;
        let main = lua
            .load(without_shebang(body))
            .set_name("@user_script")
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| compile_error(&e, "script (new function)"))?;
        // KEYS and ARGV exist before the globals are protected; each run
        // replaces them in the table behind.
        for name in ["KEYS", "ARGV"] {
            let empty = lua.create_table().map_err(setup_error)?;
            lua.globals().raw_set(name, empty).map_err(setup_error)?;
        }
        let globals: Table = lua
            .load(PROTECT_GLOBALS)
            .set_name("=protect")
            .set_mode(ChunkMode::Text)
            .call(())
            .map_err(setup_error)?;
        Ok(Prepared {
            sha: sha.to_owned(),
            lua,
            runner,
            main,
            globals,
        })
    }

    /// One kept for `sha` on this thread, if any.
    fn take(sha: &str) -> Option<Prepared> {
        PREPARED.with(|p| {
            let mut kept = p.borrow_mut();
            let state = kept.by_sha.get_mut(sha)?.pop()?;
            kept.count -= 1;
            Some(state)
        })
    }

    /// Keeps it for the next run of its script here. When the thread keeps
    /// [`MAX_PREPARED_PER_THREAD`] already, one state of another script
    /// goes to make room: the script that just ran is the likelier next.
    fn keep(self) {
        PREPARED.with(|p| {
            let mut kept = p.borrow_mut();
            if kept.count >= MAX_PREPARED_PER_THREAD {
                kept.by_sha.retain(|_, states| !states.is_empty());
                let evicted = kept.by_sha.values_mut().next().and_then(Vec::pop);
                debug_assert!(evicted.is_some(), "a full thread keeps some state");
                kept.count -= usize::from(evicted.is_some());
            }
            kept.by_sha.entry(self.sha.clone()).or_default().push(self);
            kept.count += 1;
            debug_assert!(kept.count <= MAX_PREPARED_PER_THREAD);
            debug_assert_eq!(
                kept.count,
                kept.by_sha.values().map(Vec::len).sum::<usize>()
            );
        });
    }
}

fn stopped() -> Option<Stop> {
    STOPPED.with(Cell::get)
}

/// The first fields of Lua 5.1.5's `struct lua_State` (lstate.h), up to
/// the ones the hook reads: whether the running code may yield
/// (`nCcalls <= baseCcalls`: no C call, metamethod or callback between it
/// and its coroutine's resume). `hookmask` and `basehookcount` are read
/// through the API too, and the layout is trusted only when they agree.
#[repr(C)]
struct LuaStateHead {
    next: *mut std::ffi::c_void,
    tt: u8,
    marked: u8,
    status: u8,
    top: *mut std::ffi::c_void,
    base: *mut std::ffi::c_void,
    l_g: *mut std::ffi::c_void,
    ci: *mut std::ffi::c_void,
    savedpc: *const std::ffi::c_void,
    stack_last: *mut std::ffi::c_void,
    stack: *mut std::ffi::c_void,
    end_ci: *mut std::ffi::c_void,
    base_ci: *mut std::ffi::c_void,
    stacksize: c_int,
    size_ci: c_int,
    n_ccalls: u16,
    base_ccalls: u16,
    hookmask: u8,
    allowhook: u8,
    basehookcount: c_int,
}

/// Whether a hook may yield the thread `state` runs now (Lua 5.1 allows a
/// count hook to yield, unless a C boundary is in the way, where
/// `lua_yield` would raise instead).
///
/// # Safety
/// `state` is the running thread, inside its hook.
unsafe fn may_yield(state: *mut mlua::lua_State) -> bool {
    // SAFETY: the vendored Lua is 5.1.5, whose `lua_State` starts as
    // `LuaStateHead`; the fields checked against the API below confirm it.
    let head = unsafe { &*(state as *const LuaStateHead) };
    let (mask, count) = unsafe {
        (
            mlua::ffi::lua_gethookmask(state),
            mlua::ffi::lua_gethookcount(state),
        )
    };
    c_int::from(head.hookmask) == mask
        && head.basehookcount == count
        && head.n_ccalls <= head.base_ccalls
        && head.status == 0
}

/// The count hook (installed with `lua_sethook`, so coroutines a script
/// creates inherit it: Lua 5.1 copies a thread's hook to threads it
/// creates). Raises an error once the run was killed or passed its hard
/// limit; it keeps raising at every check after that, and the sandbox's
/// `pcall` re-raises, so a script cannot catch its way past it. Past the
/// run's time limit it yields (where Lua can), so the driver can give the
/// thread back to the executor for a moment: the other clients are
/// answered (BUSY) while the script runs on.
unsafe extern "C-unwind" fn time_hook(state: *mut mlua::lua_State, _ar: *mut mlua::ffi::lua_Debug) {
    let (stop, pause) = GUARD.with(|guard| {
        let current = guard.take();
        let outcome = current.as_ref().map_or((None, false), |g| {
            // SAFETY: the run state outlives the resume the guard is set for.
            let run = unsafe { &*g.state };
            let now = Instant::now();
            if run.killed() {
                (Some(Stop::Killed), false)
            } else if now >= g.stop_at {
                (Some(Stop::TimeLimit), false)
            } else {
                (None, now >= g.pause_at)
            }
        });
        guard.set(current);
        outcome
    });
    if let Some(stop) = stop {
        STOPPED.with(|s| s.set(Some(stop)));
        // No value with a destructor lives in this frame: lua_error's
        // longjmp leaves nothing behind (as mlua's own hooks do).
        unsafe {
            mlua::ffi::lua_pushstring(state, c"script stopped".as_ptr());
            mlua::ffi::lua_error(state);
        }
    }
    // SAFETY: `state` runs this hook.
    if pause && unsafe { may_yield(state) } {
        PAUSED.with(|p| p.set(true));
        // A count hook's yield: the VM saves its place and lua_resume
        // returns; resuming continues where it stopped.
        unsafe {
            mlua::ffi::lua_yield(state, 0);
        }
    }
}

/// A C function the runner calls first, on its own thread: installs the
/// hook there.
unsafe extern "C-unwind" fn install_hook(state: *mut mlua::lua_State) -> c_int {
    unsafe {
        mlua::ffi::lua_sethook(
            state,
            Some(time_hook),
            mlua::ffi::LUA_MASKCOUNT,
            HOOK_EVERY_INSTRUCTIONS,
        );
    }
    0
}

/// The Lua half of the sandbox, run once per state with the coroutine
/// library (then removed from the globals), the hook's installer and
/// `stopped`. Returns the runner: `runner(main, ...)` runs `main(...)`
/// protected and returns `true, result` or `false, error`.
const PRELUDE: &str = r#"
local co, install_hook, stopped = ...
local create, resume, status, yield = co.create, co.resume, co.status, co.yield
local select, unpack, error, type, rawget = select, unpack, error, type, rawget

local function pack(...) return { n = select('#', ...), ... } end

-- pcall on a coroutine: redis.call's yields pass through it to the driver.
local function protected(f, ...)
  -- A coroutine runs a Lua function only: C functions (cjson.encode) and
  -- callable values run inside one.
  local g = f
  local thread = create(function(...) return g(...) end)
  local r = pack(resume(thread, ...))
  while true do
    if stopped() then error('script stopped', 0) end
    if status(thread) == 'dead' then return unpack(r, 1, r.n) end
    r = pack(resume(thread, yield(unpack(r, 2, r.n))))
  end
end

pcall = protected
xpcall = function(f, handler)
  local r = pack(protected(f))
  if r[1] then return unpack(r, 1, r.n) end
  return false, handler(r[2])
end

-- A command's arguments travel as one table (any number of them: a
-- coroutine passes at most a few thousand values); the driver resumes the
-- yield with (true, reply) or (false, error table).
redis.call = function(...)
  local ok, reply = yield(pack(...))
  if not ok then error(reply, 0) end
  return reply
end
redis.pcall = function(...)
  local ok, reply = yield(pack(...))
  return reply
end

return function(main, ...)
  install_hook()
  return protected(main, ...)
end
"#;

/// Protects the globals as Redis 7 does (its Lua has read-only tables): no
/// global may be set, added or replaced, nor a field of a library table
/// (`redis`, `cjson`, `cmsgpack`, `bit`, `string`, `table`, `math`), nor
/// their metatables, and reading an absent global is an error. Vanilla Lua
/// 5.1 has no read-only tables, so the globals table and the libraries
/// become empty proxies over hidden tables: every write reaches a
/// `__newindex` that refuses it, their metatables are guarded
/// (`__metatable`, itself such a proxy), and `setmetatable`/`rawset` refuse
/// them. Run last, when everything is in place. Returns the table behind
/// the globals, `guard` and `strict` (a guard whose absent fields are
/// errors), for the library environment.
const PROTECT_GLOBALS: &str = r#"
local G, next, error, tostring = _G, next, error, tostring
local raw_setmetatable, raw_rawset = setmetatable, rawset
local function readonly() error('Attempt to modify a readonly table', 2) end
local guarded = {}
local function shielded()
  local shield = {}
  raw_setmetatable(shield, { __newindex = readonly, __metatable = false })
  return shield
end
local function guard(t, index)
  local proxy = {}
  raw_setmetatable(proxy, { __index = index or t, __newindex = readonly, __metatable = shielded() })
  guarded[proxy] = true
  return proxy
end
local function missing(name)
  error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 3)
end
local function strict(t)
  return guard(t, function(_, name)
    local v = t[name]
    if v == nil then missing(name) end
    return v
  end)
end
local real = {}
for k, v in next, G do real[k] = v end
for k in next, real do raw_rawset(G, k, nil) end
for _, name in next, { 'redis', 'cjson', 'cmsgpack', 'bit', 'string', 'table', 'math' } do
  if real[name] then real[name] = guard(real[name]) end
end
real._G = G
real.setmetatable = function(t, mt)
  if guarded[t] then error('Attempt to modify a readonly table', 2) end
  return raw_setmetatable(t, mt)
end
real.rawset = function(t, k, v)
  if guarded[t] then error('Attempt to modify a readonly table', 2) end
  return raw_rawset(t, k, v)
end
raw_setmetatable(real, { __index = function(_, name)
  error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
end })
raw_setmetatable(G, { __index = real, __newindex = readonly, __metatable = shielded() })
guarded[G] = true
return real, guard, strict
"#;

/// The environment of a Lua library's code, as Redis 7 gives it: while the
/// code loads, its globals are only `redis` with `register_function`,
/// `log`, the `LOG_*` levels and the version (anything else is a
/// nonexistent global); once loaded, the functions it defined see the
/// script globals (whose `redis` has no `register_function`). Returns the
/// environment and the function that ends the load.
const LIBRARY_ENV: &str = r#"
local real, guard, strict, register = ...
local error = error
local loading = true
local redis = real.redis
local api = {
  register_function = function(...)
    if not loading then
      error('redis.register_function can only be called on FUNCTION LOAD command', 2)
    end
    return register(...)
  end,
  log = redis.log,
  LOG_DEBUG = redis.LOG_DEBUG, LOG_VERBOSE = redis.LOG_VERBOSE,
  LOG_NOTICE = redis.LOG_NOTICE, LOG_WARNING = redis.LOG_WARNING,
  REDIS_VERSION = redis.REDIS_VERSION, REDIS_VERSION_NUM = redis.REDIS_VERSION_NUM,
}
local load_globals = strict({ redis = strict(api) })
local env = guard({}, function(_, name)
  if loading then return load_globals[name] end
  return real[name]
end)
return env, function() loading = false end
"#;

/// A sandboxed state: base (without file access or bytecode loading),
/// table, string, math, `redis`, `cjson`, `cmsgpack`, `bit`; its runner.
fn sandbox() -> mlua::Result<(Lua, Function)> {
    // Lua 5.1 loads `coroutine` with the base library.
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )?;
    lua.set_memory_limit(MEMORY_LIMIT_BYTES)?;
    let globals = lua.globals();
    // No files, no bytecode (which Lua 5.1 does not verify), no output.
    for name in [
        "dofile", "loadfile", "load", "require", "module", "print", "setfenv", "getfenv",
        "newproxy", "gcinfo",
    ] {
        globals.raw_set(name, Value::Nil)?;
    }
    globals.raw_set("loadstring", loadstring(&lua)?)?;
    globals.raw_set("redis", redis_table(&lua)?)?;
    globals.raw_set("cjson", super::cjson::table(&lua)?)?;
    globals.raw_set("cmsgpack", super::cmsgpack::table(&lua)?)?;
    globals.raw_set("bit", super::bit::table(&lua)?)?;
    let coroutine: Table = globals.raw_get("coroutine")?;
    // SAFETY: `install_hook` only sets this thread's hook.
    let install = unsafe { lua.create_c_function(install_hook)? };
    let stopped_fn = lua.create_function(|_, ()| Ok(stopped().is_some()))?;
    let runner: Function = lua
        .load(PRELUDE)
        .set_name("=prelude")
        .set_mode(ChunkMode::Text)
        .call((coroutine, install, stopped_fn))?;
    // Scripts cannot yield themselves: only `redis.call` suspends a run.
    globals.raw_set("coroutine", Value::Nil)?;
    Ok((lua, runner))
}

/// `loadstring(text [, chunkname])` for source text only: a binary chunk
/// (Lua 5.1 does not verify bytecode) gives nil and an error, as Redis's.
fn loadstring(lua: &Lua) -> mlua::Result<Function> {
    lua.create_function(|lua, (code, name): (mlua::String, Option<String>)| {
        let bytes = code.as_bytes();
        let refuse = |message: String| -> mlua::Result<MultiValue> {
            Ok(MultiValue::from_iter([
                Value::Nil,
                Value::String(lua.create_string(message)?),
            ]))
        };
        if bytes.first() == Some(&0x1b) {
            return refuse("binary chunks are not allowed".into());
        }
        let name = name.unwrap_or_else(|| {
            format!(
                "={}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(60)])
            )
        });
        match lua
            .load(&bytes[..])
            .set_name(name)
            .set_mode(ChunkMode::Text)
            .into_function()
        {
            Ok(f) => Ok(MultiValue::from_iter([Value::Function(f)])),
            Err(e) => refuse(match &e {
                mlua::Error::SyntaxError { message, .. } => message.clone(),
                other => error_text(other),
            }),
        }
    })
}

/// The version scripts see (`redis.REDIS_VERSION`, `REDIS_VERSION_NUM`:
/// `0x00MMmmpp`).
fn version_num() -> i64 {
    crate::REDIS_VERSION
        .split('.')
        .take(3)
        .map(|part| part.parse::<i64>().unwrap_or(0).clamp(0, 255))
        .fold(0, |acc, part| (acc << 8) | part)
}

/// Which protocol a script's `redis.call` replies come in (`redis.setresp`).
#[derive(Debug, Clone, Copy)]
struct Resp(u8);

fn redis_table(lua: &Lua) -> mlua::Result<Table> {
    let redis = lua.create_table()?;
    redis.set(
        "sha1hex",
        lua.create_function(|lua, args: MultiValue| {
            let text = match args.len() {
                1 => lua.coerce_string(args[0].clone())?,
                _ => None,
            };
            let Some(text) = text else {
                return Err(mlua::Error::runtime("wrong number of arguments"));
            };
            lua.create_string(sha1_hex(&text.as_bytes()))
        })?,
    )?;
    redis.set(
        "error_reply",
        lua.create_function(|lua, args: MultiValue| {
            let text = match args.front() {
                Some(Value::String(s)) if args.len() == 1 => s.as_bytes().to_vec(),
                _ => return Err(mlua::Error::runtime("wrong number or type of arguments")),
            };
            let t = lua.create_table()?;
            t.raw_set("err", lua.create_string(error_reply_text(&text))?)?;
            Ok(t)
        })?,
    )?;
    redis.set(
        "status_reply",
        lua.create_function(|lua, args: MultiValue| {
            let text = match args.front() {
                Some(Value::String(s)) if args.len() == 1 => s.clone(),
                _ => return Err(mlua::Error::runtime("wrong number or type of arguments")),
            };
            let t = lua.create_table()?;
            t.raw_set("ok", text)?;
            Ok(t)
        })?,
    )?;
    redis.set(
        "setresp",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(mlua::Error::runtime(
                    "redis.setresp() requires one argument.",
                ));
            }
            let version = match &args[0] {
                Value::Integer(n) => *n as f64,
                Value::Number(n) => *n,
                _ => 0.0,
            };
            if version != 2.0 && version != 3.0 {
                return Err(mlua::Error::runtime("RESP version must be 2 or 3."));
            }
            lua.set_app_data(Resp(version as u8));
            Ok(())
        })?,
    )?;
    redis.set("REDIS_VERSION", crate::REDIS_VERSION)?;
    redis.set("REDIS_VERSION_NUM", version_num())?;
    // Roost keeps no script log: redis.log accepts and drops the message.
    redis.set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    for (name, level) in [
        ("LOG_DEBUG", 0),
        ("LOG_VERBOSE", 1),
        ("LOG_NOTICE", 2),
        ("LOG_WARNING", 3),
    ] {
        redis.set(name, level)?;
    }
    // Replication knobs of Redis: every script is one transaction here.
    redis.set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    redis.set(
        "set_repl",
        lua.create_function(|_, args: MultiValue| {
            if args.len() != 1 {
                return Err(mlua::Error::runtime(
                    "redis.set_repl() requires one argument.",
                ));
            }
            let flags = match &args[0] {
                Value::Integer(n) => *n,
                Value::Number(n) if n.fract() == 0.0 => *n as i64,
                _ => -1,
            };
            if !(0..=3).contains(&flags) {
                return Err(mlua::Error::runtime(
                    "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                ));
            }
            Ok(())
        })?,
    )?;
    for (name, value) in [
        ("REPL_NONE", 0),
        ("REPL_AOF", 1),
        ("REPL_REPLICA", 2),
        ("REPL_SLAVE", 2),
        ("REPL_ALL", 3),
    ] {
        redis.set(name, value)?;
    }
    Ok(redis)
}

/// `redis.error_reply(text)`'s error, as Redis 7 builds it: the text's
/// first word is its code (a leading `-` dropped), or `ERR` when the text
/// is one word.
fn error_reply_text(text: &[u8]) -> Vec<u8> {
    let text = text.strip_prefix(b"-").unwrap_or(text);
    let trimmed = {
        let mut end = text.len();
        while end > 0 && matches!(text[end - 1], b'\r' | b'\n') {
            end -= 1;
        }
        &text[..end]
    };
    if trimmed.contains(&b' ') {
        trimmed.to_vec()
    } else {
        let mut out = b"ERR ".to_vec();
        out.extend_from_slice(trimmed);
        out
    }
}

/// What one resume of a run came to.
enum Step {
    /// The script asks for a command (its arguments).
    Command(Vec<Vec<u8>>),
    /// The script asked for a command with bad arguments: `redis.call`'s
    /// error goes back to it.
    Refused(Frame),
    /// The hook yielded: the run is past its time limit.
    Pause,
    /// The script is done: its reply, or the error that stopped it.
    Done(Result<Frame, Frame>),
}

/// How long a run past its time limit runs between its pauses, and how
/// long each pause gives the executor (to answer the other clients).
const BUSY_SLICE: Duration = Duration::from_millis(5);
const BUSY_PAUSE: Duration = Duration::from_millis(1);

/// A run in progress: its state, its thread, its limits.
struct Run<'a> {
    lua: Lua,
    thread: mlua::Thread,
    call: &'a ScriptCall,
    state: Arc<RunState>,
    /// When the run passes its time limit (then it pauses every
    /// [`BUSY_SLICE`]).
    busy_at: Instant,
    stop_at: Instant,
    /// Set when the run passed its time limit: the next pause is due then.
    next_pause: Cell<Option<Instant>>,
}

impl Run<'_> {
    /// Resumes the thread with `input` under the time-limit guard.
    fn resume(&self, input: MultiValue) -> Step {
        let pause_at = self.next_pause.get().unwrap_or(self.busy_at);
        GUARD.with(|g| {
            g.set(Some(Guard {
                pause_at,
                stop_at: self.stop_at,
                state: Arc::as_ptr(&self.state),
            }))
        });
        STOPPED.with(|s| s.set(None));
        PAUSED.with(|p| p.set(false));
        let outcome = self.thread.resume::<MultiValue>(input);
        GUARD.with(|g| g.set(None));
        let stop = STOPPED.with(Cell::take);
        if let Some(stop) = stop {
            return Step::Done(Err(self.stop_error(stop)));
        }
        let paused = PAUSED.with(Cell::take);
        let values = match outcome {
            Ok(values) => values,
            Err(e) => return Step::Done(Err(self.runtime_error(&error_text(&e)))),
        };
        if self.thread.status() == ThreadStatus::Resumable {
            // A command's yield carries its table; a pause carries nothing,
            // whether the hook yielded this thread or a coroutine inside it
            // (the sandbox's `pcall` passes that yield on, with nothing, in
            // a later resume than the hook's if the hook fired again in
            // between). Resuming a pause with values would put them on the
            // paused thread's stack, under a pending instruction.
            debug_assert!(!paused || values.is_empty(), "a pause yields nothing");
            if values.is_empty() {
                return Step::Pause;
            }
            return match command_args(&self.lua, values) {
                Ok(args) => Step::Command(args),
                Err(error) => Step::Refused(error),
            };
        }
        let mut values = values.into_iter();
        let ok = matches!(values.next(), Some(Value::Boolean(true)));
        let value = values.next().unwrap_or(Value::Nil);
        if ok {
            Step::Done(to_frame(&value, 0))
        } else {
            Step::Done(Err(self.raised(&value)))
        }
    }

    /// Whether the run is past its time limit and due a pause (it gave the
    /// thread back less than [`BUSY_SLICE`] ago: not yet).
    fn pause_due(&self) -> bool {
        let now = Instant::now();
        now >= self.next_pause.get().unwrap_or(self.busy_at)
    }

    fn stop_error(&self, stop: Stop) -> Frame {
        match stop {
            Stop::TimeLimit => self.runtime_error(&format!(
                "Script ran for {} s, Roost's hard limit, and was stopped; nothing it wrote is applied",
                super::HARD_LIMIT.as_secs()
            )),
            Stop::Killed => self.runtime_error(match self.call.source {
                Source::Eval { .. } => {
                    "Script killed by user with SCRIPT KILL... (nothing it wrote is applied)"
                }
                Source::Function { .. } => {
                    "Script killed by user with FUNCTION KILL... (nothing it wrote is applied)"
                }
            }),
        }
    }

    fn runtime_error(&self, message: &str) -> Frame {
        let name = match &self.call.source {
            Source::Eval { sha, .. } => format!("f_{sha}"),
            Source::Function { name, .. } => name.clone(),
        };
        Frame::Error(clean(&format!(
            "ERR Error running script (call to {name}): @user_script: {message}"
        )))
    }

    /// The reply for an error the script raised: an error table
    /// (`redis.call`'s, `{err=...}`) is that error reply; anything else is
    /// a runtime error.
    fn raised(&self, value: &Value) -> Frame {
        match value {
            Value::Table(t) => match t.raw_get::<Value>("err") {
                Ok(Value::String(s)) => Frame::Error(error_code(&clean_bytes(&s.as_bytes()))),
                _ => self.runtime_error("(error object is a table value)"),
            },
            Value::String(s) => self.runtime_error(&String::from_utf8_lossy(&s.as_bytes())),
            Value::Error(e) => self.runtime_error(&error_text(e)),
            other => {
                self.runtime_error(&format!("(error object is a {} value)", other.type_name()))
            }
        }
    }
}

/// An mlua error's message (a Rust callback's error without its traceback).
fn error_text(error: &mlua::Error) -> String {
    match error {
        mlua::Error::CallbackError { cause, .. } => error_text(cause),
        mlua::Error::RuntimeError(text) => text.clone(),
        mlua::Error::MemoryError(_) => "not enough memory".to_owned(),
        other => other.to_string(),
    }
}

/// Error replies are one line.
fn clean(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

fn clean_bytes(text: &[u8]) -> String {
    clean(&String::from_utf8_lossy(text))
}

/// An error a script gives (an error table's `err`) is its reply as it
/// is, as Redis gives it; an empty one is `ERR`.
fn error_code(text: &str) -> String {
    if text.is_empty() {
        "ERR".to_owned()
    } else {
        text.to_owned()
    }
}

/// A command request's arguments (the table `redis.call` packed them in):
/// strings, or numbers as Lua prints them.
fn command_args(lua: &Lua, values: MultiValue) -> Result<Vec<Vec<u8>>, Frame> {
    let Some(Value::Table(packed)) = values.into_iter().next() else {
        return Err(Frame::error(
            "ERR internal error: a command without its arguments",
        ));
    };
    let n = packed.raw_get::<i64>("n").unwrap_or(0).max(0);
    if n == 0 {
        return Err(Frame::error(
            "ERR Please specify at least one argument for this redis lib call",
        ));
    }
    (1..=n)
        .map(|i| match packed.raw_get::<Value>(i) {
            Ok(Value::String(s)) => Ok(s.as_bytes().to_vec()),
            Ok(Value::Integer(n)) => Ok(n.to_string().into_bytes()),
            Ok(number @ Value::Number(_)) => match lua.coerce_string(number) {
                Ok(Some(s)) => Ok(s.as_bytes().to_vec()),
                _ => Err(bad_argument()),
            },
            _ => Err(bad_argument()),
        })
        .collect()
}

fn bad_argument() -> Frame {
    Frame::error("ERR Lua redis lib command arguments must be strings or integers")
}

/// What a command's yield is resumed with: `true, reply` or `false, error
/// table` (`redis.call` raises the latter, `redis.pcall` returns it).
fn answer(lua: &Lua, reply: Frame) -> MultiValue {
    let ok = !reply.is_error();
    let resp3 = matches!(lua.app_data_ref::<Resp>().as_deref(), Some(Resp(3)));
    let value = to_lua(lua, &reply, resp3).unwrap_or(Value::Nil);
    MultiValue::from_iter([Value::Boolean(ok), value])
}

/// A reply as the script sees it, Redis's conversion: integer -> number,
/// bulk -> string, array -> table, status -> `{ok=}`, error -> `{err=}`;
/// under RESP2 (the default) nil -> false and the RESP3-only frames read as
/// their RESP2 form; after `redis.setresp(3)` nil -> nil, map -> `{map=}`,
/// set -> `{set=}`, double -> `{double=}`, boolean -> boolean, big number
/// -> `{big_number=}`, verbatim -> `{verbatim_string={format=, string=}}`.
fn to_lua(lua: &Lua, frame: &Frame, resp3: bool) -> mlua::Result<Value> {
    let table_of = |items: &mut dyn Iterator<Item = &Frame>| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        for (i, item) in items.enumerate() {
            t.raw_set(i + 1, to_lua(lua, item, resp3)?)?;
        }
        Ok(Value::Table(t))
    };
    let field = |name: &str, value: Value| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        t.raw_set(name, value)?;
        Ok(Value::Table(t))
    };
    let text =
        |bytes: &[u8]| -> mlua::Result<Value> { Ok(Value::String(lua.create_string(bytes)?)) };
    if resp3 {
        match frame {
            Frame::Null | Frame::NullArray => return Ok(Value::Nil),
            Frame::Boolean(b) => return Ok(Value::Boolean(*b)),
            Frame::Double(d) => return field("double", Value::Number(*d)),
            Frame::BigNumber(s) => return field("big_number", text(s.as_bytes())?),
            Frame::Verbatim { format, text: body } => {
                let inner = lua.create_table()?;
                inner.raw_set("format", lua.create_string(format)?)?;
                inner.raw_set("string", lua.create_string(body)?)?;
                return field("verbatim_string", Value::Table(inner));
            }
            Frame::Map(pairs) | Frame::Pairs(pairs) => {
                let map = lua.create_table()?;
                for (k, v) in pairs {
                    let key = to_lua(lua, k, resp3)?;
                    if !matches!(key, Value::Nil) {
                        map.raw_set(key, to_lua(lua, v, resp3)?)?;
                    }
                }
                return field("map", Value::Table(map));
            }
            Frame::Set(items) => {
                let set = lua.create_table()?;
                for item in items {
                    let key = to_lua(lua, item, resp3)?;
                    if !matches!(key, Value::Nil) {
                        set.raw_set(key, true)?;
                    }
                }
                return field("set", Value::Table(set));
            }
            _ => {}
        }
    }
    Ok(match frame {
        Frame::Integer(n) => Value::Number(*n as f64),
        Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => text(b)?,
        Frame::Null | Frame::NullArray => Value::Boolean(false),
        Frame::Simple(s) => field("ok", text(s.as_bytes())?)?,
        Frame::Error(s) => field("err", text(s.as_bytes())?)?,
        Frame::BulkError(b) => field("err", text(b)?)?,
        Frame::Boolean(b) => Value::Number(if *b { 1.0 } else { 0.0 }),
        Frame::Double(d) => text(format_double(*d).as_bytes())?,
        Frame::BigNumber(s) => text(s.as_bytes())?,
        Frame::Array(items) | Frame::Set(items) | Frame::Push(items) => {
            table_of(&mut items.iter())?
        }
        Frame::Map(pairs) | Frame::Pairs(pairs) => {
            table_of(&mut pairs.iter().flat_map(|(k, v)| [k, v]))?
        }
    })
}

/// A script's value as a reply (Redis's rules): number -> integer
/// (truncated), string -> bulk, true -> 1, false/nil -> nil, a table with
/// `err`/`ok` -> error/status, RESP3's `map`/`set`/`double`/`big_number`/
/// `verbatim_string` tables -> those frames (a RESP2 client reads them in
/// their RESP2 form), any other table -> array up to its first nil.
fn to_frame(value: &Value, depth: usize) -> Result<Frame, Frame> {
    Ok(match value {
        Value::Nil | Value::Boolean(false) => Frame::Null,
        Value::Boolean(true) => Frame::Integer(1),
        Value::Integer(n) => Frame::Integer(*n),
        // `as` truncates toward zero and saturates (NaN: 0).
        Value::Number(f) => Frame::Integer(*f as i64),
        Value::String(s) => Frame::Bulk(s.as_bytes().to_vec()),
        Value::Table(t) => {
            if depth >= MAX_REPLY_DEPTH {
                return Err(Frame::error("ERR reached lua stack limit"));
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("err") {
                return Ok(Frame::Error(error_code(&clean_bytes(&s.as_bytes()))));
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
                return Ok(Frame::Simple(clean_bytes(&s.as_bytes())));
            }
            if let Some(frame) = resp3_frame(t, depth)? {
                return Ok(frame);
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => items.push(to_frame(&item, depth + 1)?),
                }
            }
            Frame::Array(items)
        }
        _ => Frame::Null,
    })
}

/// A RESP3 table (`{map=}`, `{set=}`, `{double=}`, `{big_number=}`,
/// `{verbatim_string=}`) as its frame.
fn resp3_frame(t: &Table, depth: usize) -> Result<Option<Frame>, Frame> {
    let get = |name: &str| t.raw_get::<Value>(name).unwrap_or(Value::Nil);
    if let Value::Table(map) = get("map") {
        let mut pairs = Vec::new();
        for pair in map.pairs::<Value, Value>() {
            let Ok((k, v)) = pair else { break };
            pairs.push((to_frame(&k, depth + 1)?, to_frame(&v, depth + 1)?));
        }
        return Ok(Some(Frame::Map(pairs)));
    }
    if let Value::Table(set) = get("set") {
        let mut items = Vec::new();
        for pair in set.pairs::<Value, Value>() {
            let Ok((k, _)) = pair else { break };
            items.push(to_frame(&k, depth + 1)?);
        }
        return Ok(Some(Frame::Set(items)));
    }
    match get("double") {
        Value::Number(d) => return Ok(Some(Frame::Double(d))),
        Value::Integer(n) => return Ok(Some(Frame::Double(n as f64))),
        _ => {}
    }
    if let Value::String(s) = get("big_number") {
        return Ok(Some(Frame::BigNumber(clean_bytes(&s.as_bytes()))));
    }
    if let Value::Table(v) = get("verbatim_string") {
        if let (Ok(Value::String(format)), Ok(Value::String(text))) =
            (v.raw_get::<Value>("format"), v.raw_get::<Value>("string"))
        {
            let format = format.as_bytes();
            if format.len() == 3 {
                return Ok(Some(Frame::Verbatim {
                    format: [format[0], format[1], format[2]],
                    text: text.as_bytes().to_vec(),
                }));
            }
        }
    }
    Ok(None)
}

/// Creates a string table of `items` (KEYS, ARGV).
fn strings(lua: &Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(t)
}

/// A compile error's text, as Redis words it.
fn compile_error(error: &mlua::Error, what: &str) -> Frame {
    let message = match error {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => error_text(other),
    };
    Frame::Error(clean(&format!("ERR Error compiling {what}: {message}")))
}

/// A script's body without its shebang line (Lua would not parse it); the
/// line stays, as a comment, so line numbers do not move.
fn without_shebang(body: &[u8]) -> Vec<u8> {
    if body.starts_with(b"#!") {
        let mut text = b"--".to_vec();
        text.extend_from_slice(body);
        text
    } else {
        body.to_vec()
    }
}

/// Compiles an EVAL body (SCRIPT LOAD's check); the compile error's reply.
pub(crate) fn check_script(body: &[u8]) -> Result<(), Frame> {
    let (lua, _) = sandbox().map_err(|e| Frame::error(format!("ERR {}", error_text(&e))))?;
    lua.load(without_shebang(body))
        .set_name("@user_script")
        .set_mode(ChunkMode::Text)
        .into_function()
        .map(drop)
        .map_err(|e| compile_error(&e, "script (new function)"))
}

/// What a library registered when loaded: each function's name and whether
/// it is flagged `no-writes`, with its description.
pub(crate) type Registered = Vec<(String, bool, Option<String>)>;

/// A state for a Lua library: the sandbox, its protected globals, the
/// table `redis.register_function` records into, and the library's code
/// compiled in its load-time environment ([`LIBRARY_ENV`]); with the
/// function that ends the load (the code's functions then see the script
/// globals).
struct LibraryState {
    lua: Lua,
    runner: Function,
    chunk: Function,
    registered: Table,
    loaded: Function,
}

fn library_state(code: &[u8]) -> Result<LibraryState, Frame> {
    let setup = || -> mlua::Result<(Lua, Function, Table, Table, Function)> {
        let (lua, runner) = sandbox()?;
        let registered = lua.create_table()?;
        let register = register_function(&lua, registered.clone())?;
        let (real, guard, strict): (Table, Function, Function) = lua
            .load(PROTECT_GLOBALS)
            .set_name("=protect")
            .set_mode(ChunkMode::Text)
            .call(())?;
        let (env, loaded): (Table, Function) = lua
            .load(LIBRARY_ENV)
            .set_name("=library")
            .set_mode(ChunkMode::Text)
            .call((real, guard, strict, register))?;
        Ok((lua, runner, registered, env, loaded))
    };
    let (lua, runner, registered, env, loaded) =
        setup().map_err(|e| Frame::error(format!("ERR {}", error_text(&e))))?;
    let chunk = lua
        .load(without_shebang(code))
        .set_name("@user_function")
        .set_mode(ChunkMode::Text)
        .set_environment(env)
        .into_function()
        .map_err(|e| compile_error(&e, "function"))?;
    Ok(LibraryState {
        lua,
        runner,
        chunk,
        registered,
        loaded,
    })
}

/// Runs a library's code (FUNCTION LOAD) under `time_limit` and returns
/// what it registered, or the error reply.
pub(crate) fn load_library(code: &[u8], time_limit: Duration) -> Result<Registered, Frame> {
    let library = library_state(code)?;
    let thread = library
        .lua
        .create_thread(library.runner.clone())
        .map_err(|e| Frame::error(format!("ERR {}", error_text(&e))))?;
    let stop_at = Instant::now() + time_limit;
    // Nothing kills a load: its own state, never killed.
    let state = RunState::default();
    GUARD.with(|g| {
        g.set(Some(Guard {
            pause_at: stop_at,
            stop_at,
            state: &state,
        }))
    });
    STOPPED.with(|s| s.set(None));
    PAUSED.with(|p| p.set(false));
    let outcome = thread.resume::<MultiValue>(library.chunk.clone());
    GUARD.with(|g| g.set(None));
    PAUSED.with(|p| p.set(false));
    let failure = |message: String| {
        Frame::Error(clean(&format!(
            "ERR Error registering functions: {message}"
        )))
    };
    if STOPPED.with(Cell::take).is_some() {
        return Err(failure("FUNCTION LOAD timeout".into()));
    }
    let values = outcome.map_err(|e| failure(error_text(&e)))?;
    if thread.status() == ThreadStatus::Resumable {
        return Err(failure(
            "redis.call can only be called inside a function invocation".into(),
        ));
    }
    let mut values = values.into_iter();
    if !matches!(values.next(), Some(Value::Boolean(true))) {
        let message = match values.next() {
            Some(Value::String(s)) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
            Some(Value::Error(e)) => error_text(&e),
            Some(Value::Table(t)) => match t.raw_get::<Value>("err") {
                Ok(Value::String(s)) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
                _ => "(error object is a table value)".into(),
            },
            _ => "unknown error".into(),
        };
        return Err(failure(message));
    }
    let _ = library.loaded.call::<()>(());
    let mut out = Vec::new();
    for pair in library.registered.pairs::<String, Table>() {
        let (name, entry) = pair.map_err(|e| failure(error_text(&e)))?;
        let no_writes = entry.raw_get::<bool>("no_writes").unwrap_or(false);
        let description = entry
            .raw_get::<Option<String>>("description")
            .unwrap_or(None);
        out.push((name, no_writes, description));
    }
    out.sort();
    Ok(out)
}

/// `redis.register_function(name, callback)` or
/// `redis.register_function{function_name=, callback=, flags=, description=}`,
/// recording into `registered[name] = {callback=, no_writes=, description=}`.
fn register_function(lua: &Lua, registered: Table) -> mlua::Result<Function> {
    lua.create_function(move |lua, args: MultiValue| {
        let fail = register_error;
        // Redis 7.0's checks and texts (function_lua.c), in its order.
        let args: Vec<Value> = args.into_iter().collect();
        let (name, callback, flags, description) = match args.as_slice() {
            [Value::Table(named)] => read_named_arguments(named)?,
            [_] => {
                return fail(
                    "calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).",
                )
            }
            [name, callback] => {
                let Some(name) = lua_string(name) else {
                    return fail("first argument to redis.register_function must be a string");
                };
                let Value::Function(callback) = callback else {
                    return fail("second argument to redis.register_function must be a function");
                };
                (name, callback.clone(), None, None)
            }
            _ => return fail("wrong number of arguments to redis.register_function"),
        };
        if !super::valid_function_name(&name) {
            // Redis 7.0 says "Library names" here too.
            return fail(
                "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long",
            );
        }
        if registered.raw_get::<Value>(name.as_str())? != Value::Nil {
            return fail("Function already exists in the library");
        }
        let no_writes = flags.is_some_and(|f| f.contains(&"no-writes"));
        let entry = lua.create_table()?;
        entry.raw_set("callback", callback)?;
        entry.raw_set("no_writes", no_writes)?;
        if let Some(d) = description {
            entry.raw_set("description", d)?;
        }
        registered.raw_set(name, entry)?;
        Ok(())
    })
}

/// A registration error as Redis 7.0 raises it: its text behind the
/// generic `ERR` code (FUNCTION LOAD then answers "ERR Error registering
/// functions: ERR ...", as Redis does).
fn register_error<T>(text: &str) -> mlua::Result<T> {
    Err(mlua::Error::runtime(format!("ERR {text}")))
}

/// A string argument as Redis's `luaGetStringSds` takes it (a string or a
/// number, as Lua converts it).
fn lua_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.to_string_lossy().to_string()),
        Value::Integer(n) => Some(n.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The script flags a function may declare (Redis 7.0's).
const FUNCTION_FLAGS: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

type NamedArguments = (String, Function, Option<Vec<&'static str>>, Option<String>);

/// `redis.register_function{function_name=, callback=, flags=, description=}`
/// (keys case-insensitive), with Redis 7.0's errors.
fn read_named_arguments(named: &Table) -> mlua::Result<NamedArguments> {
    let fail = register_error;
    let (mut name, mut callback, mut flags, mut description) = (None, None, None, None);
    // Bounded by the table's size.
    for pair in named.clone().pairs::<Value, Value>() {
        let (key, value) = pair?;
        let Some(key) = lua_string(&key) else {
            return fail("named argument key given to redis.register_function is not a string");
        };
        match key.to_ascii_lowercase().as_str() {
            "function_name" => {
                match lua_string(&value) {
                    Some(n) => name = Some(n),
                    None => return fail(
                        "function_name argument given to redis.register_function must be a string",
                    ),
                }
            }
            "description" => {
                match lua_string(&value) {
                    Some(d) => description = Some(d),
                    None => return fail(
                        "description argument given to redis.register_function must be a string",
                    ),
                }
            }
            "callback" => match value {
                Value::Function(f) => callback = Some(f),
                _ => {
                    return fail(
                        "callback argument given to redis.register_function must be a function",
                    )
                }
            },
            "flags" => {
                let Value::Table(table) = value else {
                    return fail(
                        "flags argument to redis.register_function must be a table representing function flags",
                    );
                };
                let mut given = Vec::new();
                for flag in table.sequence_values::<Value>() {
                    let known = lua_string(&flag?)
                        .and_then(|f| FUNCTION_FLAGS.into_iter().find(|k| *k == f));
                    match known {
                        Some(flag) => given.push(flag),
                        None => return fail("unknown flag given"),
                    }
                }
                flags = Some(given);
            }
            _ => return fail("unknown argument given to redis.register_function"),
        }
    }
    let Some(name) = name else {
        return fail("redis.register_function must get a function name argument");
    };
    let Some(callback) = callback else {
        return fail("redis.register_function must get a callback argument");
    };
    Ok((name, callback, flags, description))
}

/// Sets up a run of `call`: the state, KEYS/ARGV (EVAL) or the library's
/// functions (FCALL), protected globals, the thread; the arguments of its
/// first resume.
fn start(call: &ScriptCall) -> Result<(Lua, mlua::Thread, MultiValue, Option<Prepared>), Frame> {
    let setup_error = |e: mlua::Error| Frame::error(format!("ERR {}", error_text(&e)));
    match &call.source {
        Source::Eval { sha, body } => {
            let prepared = match Prepared::take(sha) {
                Some(p) => p,
                None => Prepared::new(sha, body)?,
            };
            let lua = prepared.lua.clone();
            // Each run starts under RESP2 (`redis.setresp`).
            lua.set_app_data(Resp(2));
            let keys = strings(&lua, &call.keys).map_err(setup_error)?;
            let argv = strings(&lua, &call.args).map_err(setup_error)?;
            prepared
                .globals
                .raw_set("KEYS", keys)
                .map_err(setup_error)?;
            prepared
                .globals
                .raw_set("ARGV", argv)
                .map_err(setup_error)?;
            let thread = lua
                .create_thread(prepared.runner.clone())
                .map_err(setup_error)?;
            let first = MultiValue::from_iter([Value::Function(prepared.main.clone())]);
            Ok((lua, thread, first, Some(prepared)))
        }
        Source::Function { library, name } => {
            let state = library_state(library.code.as_bytes())?;
            let lua = state.lua.clone();
            lua.set_app_data(Resp(2));
            let keys = strings(&lua, &call.keys).map_err(setup_error)?;
            let argv = strings(&lua, &call.args).map_err(setup_error)?;
            // Loads the library (it registers its functions), ends the
            // load, then calls the function.
            let main = lua
                .load(
                    "local chunk, loaded, registered, name, keys, argv = ...\n\
                     chunk()\n\
                     loaded()\n\
                     local entry = registered[name]\n\
                     if entry == nil then error({err = 'ERR Function not found'}) end\n\
                     return entry.callback(keys, argv)",
                )
                .set_name("=fcall")
                .set_mode(ChunkMode::Text)
                .into_function()
                .map_err(setup_error)?;
            let name = lua.create_string(name).map_err(setup_error)?;
            let first = MultiValue::from_iter([
                Value::Function(main),
                Value::Function(state.chunk),
                Value::Function(state.loaded),
                Value::Table(state.registered),
                Value::String(name),
                Value::Table(keys),
                Value::Table(argv),
            ]);
            let thread = lua.create_thread(state.runner).map_err(setup_error)?;
            Ok((lua, thread, first, None))
        }
    }
}

/// Gives the executor its thread back for a moment (a run past its time
/// limit, so the other clients are answered meanwhile).
async fn pause() {
    if roost_exec::on_executor() {
        roost_exec::sleep(BUSY_PAUSE).await;
    } else if tokio::runtime::Handle::try_current().is_ok() {
        tokio::time::sleep(BUSY_PAUSE).await;
    } else {
        std::thread::yield_now();
    }
}

/// Runs `call` inside the transaction of `tx`: `Ok(Ok(reply))` when the
/// script returned (an error reply it returns included), `Ok(Err(error))`
/// when it raised or was stopped (the caller aborts the transaction: the
/// script's commands apply nothing), `Err` when the transaction failed (a
/// conflict is retried, the script rerun from its start).
///
/// Past its time limit the run stays registered as busy (the other clients
/// get BUSY, SCRIPT KILL and FUNCTION KILL reach it) and pauses every
/// [`BUSY_SLICE`], at its hook's yields and between its commands.
pub(crate) async fn run(tx: &Tx, call: &ScriptCall) -> Result<Result<Frame, Frame>, ReactorError> {
    let (lua, thread, first, prepared) = match start(call) {
        Ok(started) => started,
        Err(error) => return Ok(Err(error)),
    };
    let started = Instant::now();
    let run = Run {
        lua,
        thread,
        call,
        state: Arc::new(RunState::default()),
        busy_at: started + call.registry.time_limit(),
        stop_at: started + super::HARD_LIMIT,
        next_pause: Cell::new(None),
    };
    let mut busy = None;
    let mut input = first;
    // Bounded: each turn runs the script on, and the hook stops it at its
    // hard limit.
    loop {
        let step = run.resume(input);
        if matches!(step, Step::Pause) || (matches!(step, Step::Command(_)) && run.pause_due()) {
            if busy.is_none() {
                busy = Some(call.registry.enter_busy(&run.state, call));
            }
            pause().await;
            run.next_pause.set(Some(Instant::now() + BUSY_SLICE));
        }
        input = match step {
            Step::Done(outcome) => {
                drop(busy);
                // A state whose run returned is fit for the next run of
                // its script; one that raised or was stopped is dropped.
                if let (Ok(_), Some(prepared)) = (&outcome, prepared) {
                    drop(run);
                    prepared.keep();
                }
                return Ok(outcome);
            }
            Step::Pause => MultiValue::new(),
            Step::Refused(error) => answer(&run.lua, error),
            Step::Command(args) => {
                let reply = match super::command_op(call, args) {
                    Ok(op) => Box::pin(tx.apply(&op)).await?,
                    Err(error) => error,
                };
                answer(&run.lua, reply)
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_at_most_its_bound_of_states_and_the_newest_script_stays() {
        let extra = 20;
        for i in 0..MAX_PREPARED_PER_THREAD + extra {
            let body = format!("return {i}");
            let sha = sha1_hex(body.as_bytes());
            Prepared::new(&sha, body.as_bytes()).unwrap().keep();
        }
        let count = PREPARED.with(|p| p.borrow().count);
        assert_eq!(count, MAX_PREPARED_PER_THREAD);
        let newest = format!("return {}", MAX_PREPARED_PER_THREAD + extra - 1);
        let taken = Prepared::take(&sha1_hex(newest.as_bytes())).expect("the newest is kept");
        assert_eq!(
            PREPARED.with(|p| p.borrow().count),
            MAX_PREPARED_PER_THREAD - 1
        );
        taken.keep();
        assert_eq!(PREPARED.with(|p| p.borrow().count), MAX_PREPARED_PER_THREAD);
        // Many runs of one script in flight at once: still the bound.
        let body = "return 'one'";
        let sha = sha1_hex(body.as_bytes());
        for _ in 0..MAX_PREPARED_PER_THREAD + extra {
            Prepared::new(&sha, body.as_bytes()).unwrap().keep();
        }
        PREPARED.with(|p| {
            let kept = p.borrow();
            assert_eq!(kept.count, MAX_PREPARED_PER_THREAD);
            let total: usize = kept.by_sha.values().map(Vec::len).sum();
            assert_eq!(total, MAX_PREPARED_PER_THREAD);
        });
    }
}

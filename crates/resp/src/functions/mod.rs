//! Procedures the application registers, called with `FCALL` and `FCALL_RO`.
//!
//! Redis 7's `FCALL name numkeys key... arg...` names a call's keys up front;
//! Roost's functions are Rust functions registered when the server starts
//! ([`Functions::register`], [`Server::bind_with`](crate::Server::bind_with)),
//! not Lua loaded over the wire. A call is one serializable transaction over
//! the keyspace reactors of its keys (inside a pipeline batch or a
//! MULTI/EXEC block it is part of that block's one transaction).
//!
//! - A function reaches only the keys it was given, by position
//!   ([`FunctionCtx::get`]`(0)` is the first key): the names in the request
//!   are then all the data it touches, which is what lets a router send the
//!   call to the node that owns those reactors.
//! - Its writes are buffered and applied only when it returns `Ok`: a function
//!   that fails ([`FunctionError::Reply`]) leaves nothing behind, even inside
//!   MULTI/EXEC where the other commands still apply.
//! - A function flagged [`no_writes`](Function::no_writes) may be called with
//!   `FCALL_RO` (the only form a read-only user may use). It cannot write, so
//!   its transaction has an empty write set and commits by read validation
//!   alone: no record is locked and no TID is drawn (the read-only path).
//!
//! [`Functions::examples`] is the library every server registers unless the
//! embedding application passes its own: `transfer`, `sum` and `reserve`.
//!
//! The Rust libraries are part of the server, not of its Lua libraries:
//! `FUNCTION LIST` shows them only when `LIBRARYNAME` names them (a
//! pattern that matches them), and `FUNCTION FLUSH`, `DELETE`, `DUMP`,
//! `RESTORE` and `STATS` never touch or count them. A Lua function may not
//! take a Rust function's name.

mod examples;

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use roost_bcounter::{BoundedCounter, FullRights};
use roost_reactor::ReactorError;
use thiserror::Error;

use crate::protocol::Frame;
use crate::sites::{refusal_text, LocalApplied, SiteCounters};
use crate::store::{
    decode_counter, encode_counter, parse_i64, SiteRow, Tx, Value, MAX_KEY_BYTES, MAX_VALUE_BYTES,
    NOT_INTEGER, WRONGTYPE,
};

/// What a function returns: its reply, or why it refused.
pub type FunctionFuture<'a> = Pin<Box<dyn Future<Output = Result<Frame, FunctionError>> + 'a>>;

type Handler = dyn for<'a> Fn(&'a FunctionCtx<'a>) -> FunctionFuture<'a> + Send + Sync;

/// The most functions one server registers.
pub const MAX_FUNCTIONS: usize = 1024;
/// The longest function or library name.
pub const MAX_NAME_BYTES: usize = 64;

/// Why a function's call did not produce its reply.
#[derive(Debug, Error)]
pub enum FunctionError {
    /// The function refuses (bad arguments, insufficient funds, a bound):
    /// the client gets this error and none of the call's writes are applied.
    #[error("{0}")]
    Reply(String),
    /// The transaction failed. A conflict is retried by the runtime (the
    /// whole transaction, the function included); anything else fails it.
    #[error(transparent)]
    Transaction(#[from] ReactorError),
}

impl FunctionError {
    /// A refusal with this text; `ERR ` is prepended unless the text starts
    /// with an upper-case error code (`BOUND ...`), as Redis error replies do.
    pub fn reply(text: impl Into<String>) -> Self {
        let text: String = text.into().replace(['\r', '\n'], " ");
        let code = text.split(' ').next().unwrap_or("");
        let has_code = !code.is_empty()
            && text.len() > code.len()
            && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
        FunctionError::Reply(if has_code {
            text
        } else {
            format!("ERR {text}")
        })
    }
}

/// A registered function: its name, its flags, its body.
pub struct Function {
    name: String,
    description: Option<String>,
    no_writes: bool,
    handler: Box<Handler>,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.name)
            .field("no_writes", &self.no_writes)
            .finish_non_exhaustive()
    }
}

impl Function {
    /// A function named `name` (letters, digits and `_`, as Redis's) whose
    /// body is `handler`: usually a `fn f<'a>(ctx: &'a FunctionCtx<'a>) ->
    /// FunctionFuture<'a> { Box::pin(async move { ... }) }`.
    pub fn new<H>(name: &str, handler: H) -> Function
    where
        H: for<'a> Fn(&'a FunctionCtx<'a>) -> FunctionFuture<'a> + Send + Sync + 'static,
    {
        Function {
            name: name.to_owned(),
            description: None,
            no_writes: false,
            handler: Box::new(handler),
        }
    }

    /// Flags the function read-only (Redis's `no-writes`): `FCALL_RO` may
    /// call it, and any write it attempts is refused.
    pub fn no_writes(mut self) -> Function {
        self.no_writes = true;
        self
    }

    /// What `FUNCTION LIST` says the function does.
    pub fn description(mut self, text: &str) -> Function {
        self.description = Some(text.to_owned());
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_no_writes(&self) -> bool {
        self.no_writes
    }
}

/// Why a function could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RegisterError {
    #[error("`{0}` is not a valid name: use 1 to {MAX_NAME_BYTES} letters, digits or underscores")]
    BadName(String),
    #[error("a function named `{0}` is already registered")]
    Duplicate(String),
    #[error("at most {MAX_FUNCTIONS} functions can be registered")]
    TooMany,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The functions a server serves, grouped in libraries (for `FUNCTION LIST`).
#[derive(Clone, Default)]
pub struct Functions {
    libraries: Vec<(String, Vec<Arc<Function>>)>,
    by_name: HashMap<String, Arc<Function>>,
    /// The Lua scripts and libraries (EVAL, FUNCTION LOAD), shared by the
    /// clones of these functions (every connection's).
    scripting: Arc<crate::scripting::Scripting>,
    plant_split: bool,
    plant_keep_site_token: bool,
}

impl std::fmt::Debug for Functions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.by_name.keys().collect();
        names.sort();
        f.debug_struct("Functions").field("names", &names).finish()
    }
}

impl Functions {
    /// No functions.
    pub fn new() -> Functions {
        Functions::default()
    }

    /// The shipped library `roost`: `transfer`, `sum` (no-writes) and
    /// `reserve` (see the `examples` module).
    pub fn examples() -> Functions {
        let mut functions = Functions::new();
        for function in examples::library() {
            functions
                .register(examples::LIBRARY, function)
                .expect("the shipped functions have distinct, valid names");
        }
        functions
    }

    /// Adds `function` to `library`. Names are case-sensitive, as Redis's.
    pub fn register(&mut self, library: &str, function: Function) -> Result<(), RegisterError> {
        if !valid_name(library) {
            return Err(RegisterError::BadName(library.to_owned()));
        }
        if !valid_name(&function.name) {
            return Err(RegisterError::BadName(function.name.clone()));
        }
        if self.by_name.contains_key(&function.name) {
            return Err(RegisterError::Duplicate(function.name.clone()));
        }
        if self.by_name.len() >= MAX_FUNCTIONS {
            return Err(RegisterError::TooMany);
        }
        let function = Arc::new(function);
        self.by_name
            .insert(function.name.clone(), Arc::clone(&function));
        match self.libraries.iter_mut().find(|(name, _)| name == library) {
            Some((_, functions)) => functions.push(function),
            None => self.libraries.push((library.to_owned(), vec![function])),
        }
        Ok(())
    }

    pub(crate) fn scripting(&self) -> &Arc<crate::scripting::Scripting> {
        &self.scripting
    }

    /// Whether a Rust function is named `name` (a Lua function may not be).
    pub(crate) fn has_rust_function(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Test-only fault: a call's writes are applied in a second transaction,
    /// after the one that ran the function committed. The concurrent-transfer
    /// tests must catch it (money appears or vanishes).
    #[doc(hidden)]
    pub fn plant_bug_split_transaction(&mut self) {
        self.plant_split = true;
    }

    /// Test-only fault: at a site, a call writes a counter's row under the
    /// token it found instead of a fresh one, so the site's node takes the
    /// row for its own last write and may overwrite the call's operation.
    /// The sites test must catch it (decrements lost: the converged value
    /// is above what the successful operations leave).
    #[doc(hidden)]
    pub fn plant_bug_keep_site_token(&mut self) {
        self.plant_keep_site_token = true;
    }

    /// `FCALL`/`FCALL_RO name numkeys key... arg...` (arity checked) as a
    /// call, or the error Redis gives.
    pub(crate) fn parse_call(&self, read_only: bool, args: &mut [Vec<u8>]) -> Result<FCall, Frame> {
        self.parse_rust_call(read_only, args)
    }

    fn parse_rust_call(&self, read_only: bool, args: &mut [Vec<u8>]) -> Result<FCall, Frame> {
        let function = std::str::from_utf8(&args[1])
            .ok()
            .and_then(|name| self.by_name.get(name))
            .ok_or_else(|| Frame::error("ERR Function not found"))?;
        let numkeys =
            parse_i64(&args[2]).ok_or_else(|| Frame::error("ERR Bad number of keys provided"))?;
        let rest = &mut args[3..];
        if numkeys < 0 {
            return Err(Frame::error("ERR Number of keys can't be negative"));
        }
        if numkeys as u64 > rest.len() as u64 {
            return Err(Frame::error(
                "ERR Number of keys can't be greater than number of args",
            ));
        }
        if read_only && !function.no_writes {
            return Err(Frame::error(
                "ERR Can not execute a script with write flag using *_ro command.",
            ));
        }
        let numkeys = numkeys as usize;
        if rest[..numkeys].iter().any(|k| k.len() > MAX_KEY_BYTES) {
            return Err(Frame::error(format!(
                "ERR key is longer than {MAX_KEY_BYTES} bytes"
            )));
        }
        let keys: Vec<Vec<u8>> = rest[..numkeys].iter_mut().map(std::mem::take).collect();
        let args: Vec<Vec<u8>> = rest[numkeys..].iter_mut().map(std::mem::take).collect();
        Ok(FCall {
            function: Arc::clone(function),
            slots: slots(&keys),
            keys,
            args,
            split: self.plant_split,
            keep_site_token: self.plant_keep_site_token,
        })
    }

    /// `FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]`'s reply.
    pub(crate) fn list(&self, args: &[Vec<u8>]) -> Frame {
        let mut pattern: Option<&[u8]> = None;
        let mut with_code = false;
        let mut i = 0;
        // Redis 7.0's order: each option once; LIBRARYNAME needs its
        // pattern. Bounded by the arguments.
        while i < args.len() {
            let option = args[i].to_ascii_lowercase();
            match option.as_slice() {
                b"withcode" if !with_code => with_code = true,
                b"libraryname" if pattern.is_none() => {
                    if i + 1 >= args.len() {
                        return Frame::error("ERR library name argument was not given");
                    }
                    pattern = Some(&args[i + 1]);
                    i += 1;
                }
                _ => {
                    return Frame::error(format!(
                        "ERR Unknown argument {}",
                        String::from_utf8_lossy(&args[i])
                    ))
                }
            }
            i += 1;
        }
        // The Rust libraries are the application's, compiled in: FUNCTION
        // LIST shows them only when LIBRARYNAME asks for them (Redis's
        // tools expect the list to hold what FUNCTION LOAD loaded).
        let libraries = self
            .libraries
            .iter()
            .filter(|(name, _)| pattern.is_some_and(|p| glob_match(p, name.as_bytes())))
            .map(|(name, functions)| {
                let mut fields = vec![
                    (Frame::bulk("library_name"), Frame::bulk(name.as_str())),
                    (Frame::bulk("engine"), Frame::bulk("RUST")),
                    (
                        Frame::bulk("functions"),
                        Frame::Array(functions.iter().map(|f| describe(f)).collect()),
                    ),
                ];
                if with_code {
                    fields.push((
                        Frame::bulk("library_code"),
                        Frame::bulk("-- compiled into the server (Rust)"),
                    ));
                }
                Frame::Map(fields)
            })
            .collect::<Vec<Frame>>();
        let lua = self
            .scripting
            .libraries()
            .into_iter()
            .filter(|library| pattern.is_none_or(|p| glob_match(p, library.name.as_bytes())))
            .map(|library| {
                let functions = library
                    .functions
                    .iter()
                    .map(|(name, no_writes, description)| {
                        Frame::Map(vec![
                            (Frame::bulk("name"), Frame::bulk(name.as_str())),
                            (
                                Frame::bulk("description"),
                                description.as_deref().map_or(Frame::Null, Frame::bulk),
                            ),
                            (
                                Frame::bulk("flags"),
                                Frame::Set(if *no_writes {
                                    vec![Frame::bulk("no-writes")]
                                } else {
                                    Vec::new()
                                }),
                            ),
                        ])
                    })
                    .collect();
                let mut fields = vec![
                    (
                        Frame::bulk("library_name"),
                        Frame::bulk(library.name.as_str()),
                    ),
                    (Frame::bulk("engine"), Frame::bulk("LUA")),
                    (Frame::bulk("functions"), Frame::Array(functions)),
                ];
                if with_code {
                    fields.push((
                        Frame::bulk("library_code"),
                        Frame::bulk(library.code.as_str()),
                    ));
                }
                Frame::Map(fields)
            });
        Frame::Array(libraries.into_iter().chain(lua).collect())
    }
}

fn describe(function: &Function) -> Frame {
    let flags = if function.no_writes {
        vec![Frame::bulk("no-writes")]
    } else {
        Vec::new()
    };
    Frame::Map(vec![
        (Frame::bulk("name"), Frame::bulk(function.name.as_str())),
        (
            Frame::bulk("description"),
            function
                .description
                .as_deref()
                .map_or(Frame::Null, Frame::bulk),
        ),
        (Frame::bulk("flags"), Frame::Set(flags)),
    ])
}

/// Redis's glob with `*` and `?` (no classes), enough for LIBRARYNAME.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    // Iterative with one backtrack point: linear in practice, bounded by
    // pattern x text in the worst case.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// For each key, the position of the first key equal to it: a key named
/// twice is one key, so a write through either name is seen through both.
fn slots(keys: &[Vec<u8>]) -> Vec<usize> {
    let mut first: HashMap<&[u8], usize> = HashMap::with_capacity(keys.len());
    keys.iter()
        .enumerate()
        .map(|(i, key)| *first.entry(key.as_slice()).or_insert(i))
        .collect()
}

/// A parsed `FCALL`: the function, its keys and arguments.
#[derive(Debug)]
pub(crate) struct FCall {
    function: Arc<Function>,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    /// `slots[i]`: the first position of a key equal to `keys[i]`.
    slots: Vec<usize>,
    /// The planted fault of [`Functions::plant_bug_split_transaction`].
    pub(crate) split: bool,
    /// The planted fault of [`Functions::plant_bug_keep_site_token`].
    keep_site_token: bool,
}

impl FCall {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        self.keys.first().map(Vec::as_slice)
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        self.keys.iter().chain(&self.args).map(Vec::len).sum()
    }
}

/// Writes a call made, in the order of the keys' first positions; `None`
/// deletes.
pub(crate) type Writes = Vec<(Vec<u8>, Option<Value>)>;

/// Site rows a call wrote (with sites), in the order of the keys' first
/// positions.
pub(crate) type SiteWrites = Vec<(Vec<u8>, SiteRow)>;

/// Runs `call` inside the transaction of `tx`. Returns the function's reply
/// (its refusal as an error reply) and the writes to apply: `Ok` only.
pub(crate) async fn run_call(
    tx: &Tx,
    call: &FCall,
) -> Result<(Frame, Writes, SiteWrites), ReactorError> {
    let ctx = FunctionCtx {
        tx,
        call,
        written: RefCell::new(vec![None; call.keys.len()]),
        site_written: RefCell::new(vec![None; call.keys.len()]),
    };
    let outcome = (call.function.handler)(&ctx).await;
    match outcome {
        Ok(reply) => {
            let writes = keyed(&call.keys, ctx.written.into_inner());
            let site_writes = keyed(&call.keys, ctx.site_written.into_inner());
            Ok((reply, writes, site_writes))
        }
        Err(FunctionError::Reply(text)) => Ok((Frame::Error(text), Vec::new(), Vec::new())),
        Err(FunctionError::Transaction(e)) => Err(e),
    }
}

/// The writes of the slots that have one, each with its key.
fn keyed<T>(keys: &[Vec<u8>], slots: Vec<Option<T>>) -> Vec<(Vec<u8>, T)> {
    slots
        .into_iter()
        .enumerate()
        .filter_map(|(slot, w)| w.map(|w| (keys[slot].clone(), w)))
        .collect()
}

/// What a function sees of its call: its keys (by position), its arguments,
/// and typed access to the keys' values inside the call's transaction.
pub struct FunctionCtx<'a> {
    tx: &'a Tx,
    call: &'a FCall,
    /// Per slot, the value written (`Some(None)`: deleted), not yet applied.
    written: RefCell<Vec<Option<Option<Value>>>>,
    /// With sites: per slot, the counter row written, not yet applied.
    site_written: RefCell<Vec<Option<SiteRow>>>,
}

impl FunctionCtx<'_> {
    /// The keys of the call, in order.
    pub fn keys(&self) -> &[Vec<u8>] {
        &self.call.keys
    }

    /// The arguments after the keys.
    pub fn args(&self) -> &[Vec<u8>] {
        &self.call.args
    }

    /// Whether this function may not write (`no-writes`).
    pub fn read_only(&self) -> bool {
        self.call.function.no_writes
    }

    /// Argument `i`, or an error naming what is missing.
    pub fn arg(&self, i: usize) -> Result<&[u8], FunctionError> {
        self.call.args.get(i).map(Vec::as_slice).ok_or_else(|| {
            FunctionError::reply(format!(
                "function '{}' needs at least {} argument(s), got {}",
                self.call.function.name,
                i + 1,
                self.call.args.len()
            ))
        })
    }

    /// Argument `i` as an integer (Redis's syntax).
    pub fn arg_i64(&self, i: usize) -> Result<i64, FunctionError> {
        parse_i64(self.arg(i)?).ok_or_else(|| FunctionError::reply(NOT_INTEGER))
    }

    fn slot(&self, key: usize) -> Result<usize, FunctionError> {
        self.call.slots.get(key).copied().ok_or_else(|| {
            FunctionError::reply(format!(
                "function '{}' uses key #{} but the call names {} key(s)",
                self.call.function.name,
                key + 1,
                self.call.keys.len()
            ))
        })
    }

    /// Key `key`'s value: the one this call wrote, else the stored one.
    async fn value(&self, key: usize) -> Result<Option<Value>, FunctionError> {
        let slot = self.slot(key)?;
        if let Some(written) = &self.written.borrow()[slot] {
            return Ok(written.clone());
        }
        Ok(self.tx.read(&self.call.keys[slot]).await?.map(|e| e.value))
    }

    /// Refuses any write of a `no-writes` function.
    fn check_writable(&self) -> Result<(), FunctionError> {
        if self.call.function.no_writes {
            return Err(FunctionError::reply(
                "Write commands are not allowed from read-only scripts.",
            ));
        }
        Ok(())
    }

    fn write(&self, key: usize, value: Option<Value>) -> Result<(), FunctionError> {
        let slot = self.slot(key)?;
        self.check_writable()?;
        self.written.borrow_mut()[slot] = Some(value);
        Ok(())
    }

    /// The string at key `key` (`None`: absent).
    pub async fn get(&self, key: usize) -> Result<Option<Vec<u8>>, FunctionError> {
        match self.value(key).await? {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            Some(Value::Int(n)) => Ok(Some(n.to_string().into_bytes())),
            Some(_) => Err(FunctionError::reply(WRONGTYPE)),
        }
    }

    /// The integer at key `key` (`None`: absent).
    pub async fn get_i64(&self, key: usize) -> Result<Option<i64>, FunctionError> {
        match self.value(key).await? {
            None => Ok(None),
            Some(Value::Int(n)) => Ok(Some(n)),
            Some(Value::Str(s)) => parse_i64(&s)
                .map(Some)
                .ok_or_else(|| FunctionError::reply(NOT_INTEGER)),
            Some(_) => Err(FunctionError::reply(WRONGTYPE)),
        }
    }

    /// Sets key `key` to the string `value` (applied when the function
    /// returns `Ok`). A key's time to live is kept, as INCR keeps it; an
    /// expired key reads as absent and is replaced.
    pub fn set(&self, key: usize, value: impl Into<Vec<u8>>) -> Result<(), FunctionError> {
        let value = value.into();
        if value.len() > MAX_VALUE_BYTES {
            return Err(FunctionError::reply(format!(
                "value exceeds the maximum allowed size ({MAX_VALUE_BYTES} bytes)"
            )));
        }
        self.write(key, Some(Value::Str(value)))
    }

    pub fn set_i64(&self, key: usize, value: i64) -> Result<(), FunctionError> {
        self.write(key, Some(Value::Int(value)))
    }

    /// Deletes key `key`.
    pub fn del(&self, key: usize) -> Result<(), FunctionError> {
        self.write(key, None)
    }

    async fn counter(
        &self,
        key: usize,
    ) -> Result<Option<BoundedCounter<FullRights>>, FunctionError> {
        match self.value(key).await? {
            None => Ok(None),
            Some(Value::Counter(bytes)) => decode_counter(&bytes).map(Some).map_err(|e| match e {
                Frame::Error(text) => FunctionError::Reply(text),
                other => FunctionError::reply(format!("{other:?}")),
            }),
            Some(_) => Err(FunctionError::reply(WRONGTYPE)),
        }
    }

    /// With sites: key `key` as the site knows counter names, and its row
    /// (the one this call wrote, else the stored one).
    async fn site_row(&self, key: usize) -> Result<(&str, Option<SiteRow>), FunctionError> {
        let slot = self.slot(key)?;
        let name = std::str::from_utf8(&self.call.keys[slot])
            .map_err(|_| FunctionError::reply("no such bounded counter"))?;
        if let Some(row) = &self.site_written.borrow()[slot] {
            return Ok((name, Some(row.clone())));
        }
        Ok((name, self.tx.read_site_row(&self.call.keys[slot]).await?))
    }

    /// The value of the bounded counter at key `key` (`None`: absent). At a
    /// site, the site's replica (this site's view of the counter).
    pub async fn counter_value(&self, key: usize) -> Result<Option<i64>, FunctionError> {
        if let Some(sites) = self.tx.sites() {
            let (name, row) = self.site_row(key).await?;
            return match row {
                None => Ok(None),
                Some(row) => sites
                    .state_value(name, &row.state)
                    .map(Some)
                    .map_err(|e| FunctionError::reply(format!("bounded counter: {e}"))),
            };
        }
        match self.counter(key).await? {
            None => Ok(None),
            Some(counter) => counter
                .value()
                .map(Some)
                .map_err(|e| FunctionError::reply(format!("bounded counter: {e}"))),
        }
    }

    /// Adds `delta` to the bounded counter at key `key` (BC.INC for a
    /// positive delta, BC.DEC for a negative one); refused with a `BOUND`
    /// error when the counter's bound forbids it. Returns the new value.
    ///
    /// At a site, the operation is strictly local (the seed's
    /// `strict-local` flag: this site's rights only, as a transaction
    /// cannot wait for other sites): refused with `BOUND ...` when the bound
    /// forbids it, `RETRY ...` when this site lacks the rights (BC.DEC with
    /// GLOBAL may then get them).
    pub async fn counter_add(&self, key: usize, delta: i64) -> Result<i64, FunctionError> {
        if let Some(sites) = self.tx.sites() {
            return self.site_counter_add(sites.as_ref(), key, delta).await;
        }
        let Some(mut counter) = self.counter(key).await? else {
            return Err(FunctionError::reply("no such bounded counter"));
        };
        let changed = if delta >= 0 {
            counter
                .increment(delta.unsigned_abs())
                .map_err(|e| e.to_string())
        } else {
            counter
                .decrement(delta.unsigned_abs())
                .map_err(|e| e.to_string())
        };
        if let Err(e) = changed {
            return Err(FunctionError::reply(format!(
                "BOUND the counter's bound forbids it: {e}"
            )));
        }
        let value = counter
            .value()
            .map_err(|e| FunctionError::reply(format!("bounded counter: {e}")))?;
        self.write(key, Some(Value::Counter(encode_counter(&counter))))?;
        Ok(value)
    }
}

impl FunctionCtx<'_> {
    async fn site_counter_add(
        &self,
        sites: &dyn SiteCounters,
        key: usize,
        delta: i64,
    ) -> Result<i64, FunctionError> {
        self.check_writable()?;
        let (name, row) = self.site_row(key).await?;
        let Some(row) = row else {
            return Err(FunctionError::reply("no such bounded counter"));
        };
        let applied = sites
            .apply_local(name, &row.state, delta >= 0, delta.unsigned_abs())
            .map_err(|e| FunctionError::reply(format!("bounded counter: {e}")))?;
        match applied {
            LocalApplied::Applied {
                state,
                token,
                value,
            } => {
                let token = if self.call.keep_site_token {
                    row.token
                } else {
                    token
                };
                let slot = self.slot(key)?;
                self.site_written.borrow_mut()[slot] = Some(SiteRow { state, token });
                Ok(value)
            }
            LocalApplied::Refused(outcome) => Err(FunctionError::reply(
                refusal_text(outcome).unwrap_or_else(|| format!("ERR {outcome:?}")),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop<'a>(_: &'a FunctionCtx<'a>) -> FunctionFuture<'a> {
        Box::pin(async { Ok(Frame::ok()) })
    }

    #[test]
    fn names_and_registration() {
        let mut functions = Functions::examples();
        assert_eq!(functions.len(), 3);
        assert_eq!(
            functions.register("lib", Function::new("transfer", noop)),
            Err(RegisterError::Duplicate("transfer".into()))
        );
        assert!(matches!(
            functions.register("lib", Function::new("bad name", noop)),
            Err(RegisterError::BadName(_))
        ));
        assert!(matches!(
            functions.register("bad-lib", Function::new("ok", noop)),
            Err(RegisterError::BadName(_))
        ));
        functions
            .register("lib", Function::new("Transfer", noop))
            .unwrap();
        assert_eq!(functions.len(), 4);
    }

    #[test]
    fn registration_is_bounded() {
        let mut functions = Functions::new();
        for i in 0..MAX_FUNCTIONS {
            functions
                .register("lib", Function::new(&format!("f{i}"), noop))
                .unwrap();
        }
        assert_eq!(
            functions.register("lib", Function::new("one_more", noop)),
            Err(RegisterError::TooMany)
        );
    }

    #[test]
    fn refusals_carry_an_error_code() {
        let text = |e: FunctionError| match e {
            FunctionError::Reply(t) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(text(FunctionError::reply("no funds")), "ERR no funds");
        assert_eq!(text(FunctionError::reply("BOUND below 0")), "BOUND below 0");
        assert_eq!(text(FunctionError::reply("ERR x\r\ny")), "ERR x  y");
        assert_eq!(text(FunctionError::reply("OK")), "ERR OK");
    }

    #[test]
    fn keys_named_twice_share_a_slot() {
        let keys: Vec<Vec<u8>> = ["a", "b", "a", "c", "b"]
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        assert_eq!(slots(&keys), vec![0, 1, 0, 3, 1]);
    }

    #[test]
    fn globs() {
        assert!(glob_match(b"*", b"roost"));
        assert!(glob_match(b"ro*", b"roost"));
        assert!(glob_match(b"r?ost", b"roost"));
        assert!(glob_match(b"*st", b"roost"));
        assert!(glob_match(b"*o*t", b"roost"));
        assert!(!glob_match(b"ro", b"roost"));
        assert!(!glob_match(b"x*", b"roost"));
        assert!(glob_match(b"", b""));
    }

    fn call(functions: &Functions, read_only: bool, text: &str) -> Result<FCall, Frame> {
        let mut args: Vec<Vec<u8>> = text.split(' ').map(|s| s.as_bytes().to_vec()).collect();
        functions.parse_call(read_only, &mut args)
    }

    #[test]
    fn call_errors_follow_redis() {
        let functions = Functions::examples();
        let error = |r: Result<FCall, Frame>| match r {
            Err(Frame::Error(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            error(call(&functions, false, "fcall nosuch 0")),
            "ERR Function not found"
        );
        assert_eq!(
            error(call(&functions, false, "fcall sum x")),
            "ERR Bad number of keys provided"
        );
        assert_eq!(
            error(call(&functions, false, "fcall sum -1")),
            "ERR Number of keys can't be negative"
        );
        assert_eq!(
            error(call(&functions, false, "fcall sum 3 a b")),
            "ERR Number of keys can't be greater than number of args"
        );
        assert_eq!(
            error(call(&functions, true, "fcall_ro transfer 2 a b 1")),
            "ERR Can not execute a script with write flag using *_ro command."
        );
        let ok = call(&functions, true, "fcall_ro sum 2 a b").unwrap();
        assert_eq!(ok.keys, vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(ok.args.is_empty());
        let ok = call(&functions, false, "fcall transfer 2 a b 10").unwrap();
        assert_eq!(ok.args, vec![b"10".to_vec()]);
    }
}

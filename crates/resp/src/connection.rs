//! One client connection: read, parse and run in order up to the pipeline
//! depth, reply in order.
//!
//! A request that arrived whole is parsed in place; GET, SET without options,
//! INCR and DECR are then built straight from the read buffer (copying only
//! their key and value), and every other request takes the general path
//! (`classify`) with its arguments copied, which answers every error.
//!
//! Consecutive data commands of a pipeline (outside MULTI) run as one root
//! transaction, up to `max_batch_commands` commands or
//! [`MAX_BATCH_PAYLOAD_BYTES`]: the client saw none of their replies before
//! sending them, so running them together, in order, is a serialization the
//! client cannot tell from one transaction each. A batch that fails as a
//! whole (retries exhausted, too large) is re-run one command per
//! transaction, so only the command at fault gets the error.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::admin::{self, Peer, Registered};
use crate::blocked::{self, BlockedWaiter, RunOps, Turn};
use crate::commands::{self, arity_ok, lookup_index, unknown_command, wrong_arity, Kind, Spec};
use crate::config::Access;
use crate::forward::ForwardError;
use crate::keyspace::KeyOp;
use crate::protocol::{Args, Frame, InPlace, Limits, Parsed, Protocol, RequestParser};
use crate::server::ServerShared;
use crate::store::{BatchOutcome, Op, SetCond, Watched};

/// A batch is cut when its keys and values reach this size.
const MAX_BATCH_PAYLOAD_BYTES: usize = 1 << 20;
/// Bytes read from the socket at a time (at least).
const READ_CHUNK_BYTES: usize = 16 << 10;
/// Redis's limits for clients that have not authenticated yet.
const UNAUTHENTICATED_MAX_ARRAY_LEN: usize = 10;
const UNAUTHENTICATED_MAX_BULK_BYTES: usize = 16 << 10;
/// The longest client name.
const MAX_CLIENT_NAME_BYTES: usize = 256;
/// Input read from a blocked client and kept for after its wait: past it
/// the socket is no longer read until the wait ends.
const MAX_INPUT_WHILE_BLOCKED: usize = 1 << 20;

const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// Commands queued between MULTI and EXEC.
struct Multi {
    ops: Vec<Op>,
    /// Their keys' and values' bytes (`Op::payload_bytes`).
    bytes: usize,
    /// A queued command was rejected: EXEC answers EXECABORT.
    dirty: bool,
    /// Where the whole transaction may be shipped (every queued command a
    /// write its owner's node serves), with the commands' bytes.
    route: MultiRoute,
}

/// Where the commands queued in a MULTI may run.
enum MultiRoute {
    /// Nothing queued yet.
    Empty,
    /// All at the owner at this address: MULTI, these commands, EXEC.
    To(SocketAddr, Vec<u8>),
    /// Here.
    Local,
}

struct Connection<'a> {
    shared: &'a ServerShared,
    id: u64,
    /// This connection in the server's registry (CLIENT LIST): its name,
    /// protocol, user, MULTI state and last command.
    client: Registered<'a>,
    protocol: Protocol,
    /// The authenticated user and their access; `None` before AUTH when
    /// authentication is required.
    user: Option<(String, Access)>,
    multi: Option<Multi>,
    /// WATCHed keys and the stamps they had (`None`: absent).
    watched: Watched,
    parser: RequestParser,
    close: bool,
    tally: Tally,
    /// Writes may be shipped to their owner (a cluster node's client; never
    /// a forwarded connection, so nothing is forwarded twice).
    may_forward: bool,
    /// The classified command's owner and bytes, when it is to be shipped.
    next_forward: Option<(SocketAddr, Vec<u8>)>,
}

pub(crate) async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin, T: Timers>(
    mut stream: S,
    shared: &ServerShared,
    peer: Peer,
) {
    let config = &shared.config;
    let user = (!config.auth_required()).then(|| ("default".to_owned(), Access::ReadWrite));
    let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
    let client = shared.clients.register(id, peer, "default");
    let mut conn = Connection {
        shared,
        id,
        client,
        protocol: Protocol::Resp2,
        parser: RequestParser::new(config.limits()),
        user,
        multi: None,
        watched: Vec::new(),
        close: false,
        tally: Tally::default(),
        may_forward: shared.forwarding.is_some(),
        next_forward: None,
    };
    conn.update_limits();
    let depth = config.max_pipeline_depth;
    let reply_limit = config.max_reply_buffer_bytes;
    let mut input: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut out: Vec<u8> = Vec::new();
    let mut spans: Vec<Range<usize>> = Vec::new();
    let mut batch = Batch::default();
    loop {
        // Run what has arrived, in order, at most `depth` commands ahead of
        // replies; consecutive data commands go into one batch.
        let mut consumed = 0;
        let mut handled = 0;
        let mut failure = None;
        while handled < depth && !conn.close {
            let step = match conn.parser.parse_in_place(&input[consumed..], &mut spans) {
                Ok(InPlace::Spans { consumed: used }) => {
                    let request = &input[consumed..consumed + used];
                    consumed += used;
                    conn.classify_in_place(request, &spans)
                }
                Ok(InPlace::Parsed(Parsed {
                    consumed: used,
                    request,
                })) => {
                    consumed += used;
                    match request {
                        Some(args) => conn.classify(args),
                        None => break,
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            handled += 1;
            if let Some(blocked) = conn.dispatch(step, &mut batch, &mut out).await {
                // The replies before it go out before it waits.
                conn.flush_tally();
                if !out.is_empty() && !write_replies(&mut stream, &mut out, shared).await {
                    return;
                }
                match conn.wait::<S, T>(blocked, &mut stream, &mut input).await {
                    Some(reply) => conn.answer(&reply, &mut out),
                    // The client went away, or the server stops.
                    None => return,
                }
            }
            if out.len() >= reply_limit && !write_replies(&mut stream, &mut out, shared).await {
                // A client that pipelines without reading its replies waits
                // here, on the socket, before more of its commands run.
                return;
            }
        }
        conn.flush(&mut batch, &mut out).await;
        conn.flush_tally();
        input.drain(..consumed);
        if !out.is_empty() && !write_replies(&mut stream, &mut out, shared).await {
            return;
        }
        if conn.close {
            return;
        }
        if let Some(error) = failure {
            // As Redis: the error, then the connection is closed.
            shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
            conn.answer(&Frame::Error(error.to_string()), &mut out);
            let _ = stream.write_all(&out).await;
            return;
        }
        if handled >= depth {
            continue;
        }
        if input.capacity() - input.len() < READ_CHUNK_BYTES / 2 {
            input.reserve(READ_CHUNK_BYTES);
        }
        // A server that stops closes its connections here, between
        // requests (connections served on executors outlive the listener's
        // runtime otherwise).
        let stopping = shared.stopping.notified();
        let mut stopping = std::pin::pin!(stopping);
        stopping.as_mut().enable();
        if shared.stopped.load(Ordering::Acquire) {
            return;
        }
        tokio::select! {
            read = stream.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            () = stopping => return,
        }
    }
}

/// Writes the buffered replies (false if the client is gone); a buffer grown
/// past the limit by one large reply is given back.
async fn write_replies<S: AsyncWrite + Unpin>(
    stream: &mut S,
    out: &mut Vec<u8>,
    shared: &ServerShared,
) -> bool {
    shared.stats.note_reply_buffer(out.len());
    let written = stream.write_all(out).await.is_ok();
    out.clear();
    out.shrink_to(shared.config.max_reply_buffer_bytes);
    written
}

/// Data commands waiting to run as one transaction.
#[derive(Default)]
struct Batch {
    ops: Vec<Op>,
    /// Their keys' and values' bytes.
    bytes: usize,
    /// Per command, where it runs if not here (its owner's RESP address)
    /// and its bytes to ship; empty while every command runs here.
    ships: Vec<Option<(SocketAddr, Vec<u8>)>>,
}

/// One owner's commands of a batch: its address, the commands' places in
/// the batch, their bytes, and the commands (run here if nothing reaches
/// the owner).
type Shipment = (SocketAddr, Vec<usize>, Vec<u8>, Vec<Op>);

/// One command's reply in a batch that ran in several places.
enum Piece {
    Frame(Frame),
    Bytes(Vec<u8>),
}

impl Connection<'_> {
    /// The connection's name (CLIENT SETNAME, HELLO SETNAME; `None` clears).
    fn set_name(&mut self, name: Option<Vec<u8>>) {
        *self.client.info.name.lock().expect("client name") = name;
    }

    fn set_protocol(&mut self, protocol: Protocol) {
        self.protocol = protocol;
        let version = match protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        };
        self.client.info.resp.store(version, Ordering::Relaxed);
    }

    fn authenticated(&self) -> bool {
        self.user.is_some()
    }

    /// Unauthenticated clients get Redis's small limits (10 arguments of
    /// 16 KiB), so a stranger cannot make the server buffer much.
    fn update_limits(&mut self) {
        let limits = self.shared.config.limits();
        self.parser.set_limits(if self.authenticated() {
            limits
        } else {
            Limits {
                max_array_len: UNAUTHENTICATED_MAX_ARRAY_LEN.min(limits.max_array_len),
                max_bulk_bytes: UNAUTHENTICATED_MAX_BULK_BYTES.min(limits.max_bulk_bytes),
                ..limits
            }
        });
    }

    /// Counts a command (`index` into the command table, if known); the
    /// counts reach the shared statistics in [`flush_tally`](Self::flush_tally).
    fn count(&mut self, index: Option<usize>) {
        self.tally.total += 1;
        if let Some(index) = index {
            match &mut self.tally.run {
                Some((last, n)) if *last == index => *n += 1,
                run => {
                    if let Some((last, n)) = run.take() {
                        self.shared.stats.count_command(last, n);
                    }
                    *run = Some((index, 1));
                }
            }
        }
    }

    /// Adds the counted commands to the shared statistics.
    fn flush_tally(&mut self) {
        let stats = &self.shared.stats;
        if self.tally.total > 0 {
            stats
                .commands
                .fetch_add(std::mem::take(&mut self.tally.total), Ordering::Relaxed);
        }
        if let Some((index, n)) = self.tally.run.take() {
            stats.count_command(index, n);
            self.client.info.note_command(index);
        }
    }

    /// Runs one request's step: a data command outside MULTI joins the
    /// batch; anything else runs the batch first, then itself. A blocking
    /// command outside MULTI runs the batch and is returned, for
    /// [`wait`](Self::wait).
    async fn dispatch(
        &mut self,
        step: Step,
        batch: &mut Batch,
        out: &mut Vec<u8>,
    ) -> Option<Blocked> {
        match step {
            Step::Data(op) if self.multi.is_none() && op.blocking_timeout_ms().is_some() => {
                self.flush(batch, out).await;
                let timeout_ms = op.blocking_timeout_ms().unwrap_or(0);
                return Some(Blocked { op, timeout_ms });
            }
            Step::Data(Op::Key(KeyOp::Flush)) if self.multi.is_none() => {
                self.flush(batch, out).await;
                let reply = match self.shared.store.flush_all().await {
                    Ok(()) => Frame::ok(),
                    Err(e) => transaction_failed(&e),
                };
                self.answer(&reply, out);
            }
            Step::Data(op) if self.multi.is_none() => {
                match self.next_forward.take() {
                    Some(ship) => {
                        batch.ships.resize_with(batch.ops.len(), || None);
                        batch.ships.push(Some(ship));
                    }
                    None if !batch.ships.is_empty() => batch.ships.push(None),
                    None => {}
                }
                batch.bytes += op.payload_bytes();
                batch.ops.push(op);
                if batch.ops.len() >= self.shared.config.max_batch_commands
                    || batch.bytes >= MAX_BATCH_PAYLOAD_BYTES
                {
                    self.flush(batch, out).await;
                }
            }
            Step::Data(op) => {
                let forward = self.next_forward.take();
                if let Some(multi) = &mut self.multi {
                    multi.route = match (
                        std::mem::replace(&mut multi.route, MultiRoute::Local),
                        forward,
                    ) {
                        (MultiRoute::Empty, Some((to, raw))) => MultiRoute::To(to, raw),
                        (MultiRoute::To(to, mut queued), Some((next, raw))) if next == to => {
                            queued.extend_from_slice(&raw);
                            MultiRoute::To(to, queued)
                        }
                        _ => MultiRoute::Local,
                    };
                }
                let reply = self.run_step(Step::Data(op)).await;
                self.answer(&reply, out);
            }
            step => {
                self.flush(batch, out).await;
                // INFO sees every command so far, itself included.
                self.flush_tally();
                if matches!(&step, Step::Conn(spec, _) if spec.name == "exec") {
                    if let Some(replies) = self.forward_exec().await {
                        self.client.info.multi.store(-1, Ordering::Relaxed);
                        out.extend_from_slice(&replies);
                        return None;
                    }
                }
                let reply = self.run_step(step).await;
                // After HELLO, its reply is already in the protocol it chose.
                self.answer(&reply, out);
            }
        }
        None
    }

    /// Waits for a blocking command: queues it among the blocked clients,
    /// whose commands (their non-blocking forms) a sweep runs right away,
    /// after every push and every [`blocked::BLOCKED_RETRY`], oldest first,
    /// as one transaction ([`crate::blocked`]), until it pops something or its
    /// timeout passes (then the nil array, Redis's reply at a timeout).
    /// Meanwhile the socket is watched, so a client that goes away ends the
    /// wait (`None`, as does a server that stops); what it sends meanwhile
    /// is kept in `input`, for after, up to [`MAX_INPUT_WHILE_BLOCKED`].
    /// Nothing is held open between sweeps: no transaction, no executor
    /// thread.
    async fn wait<S: AsyncRead + Unpin, T: Timers>(
        &mut self,
        blocked: Blocked,
        stream: &mut S,
        input: &mut Vec<u8>,
    ) -> Option<Frame> {
        let started = Instant::now();
        // 0: no timeout (and a deadline past what `Instant` holds: none either).
        let deadline = match blocked.timeout_ms {
            0 => None,
            ms => started.checked_add(Duration::from_millis(ms)),
        };
        // Counted in INFO's `blocked_clients` and queued from before its
        // first run until it ends, however it ends. Its retries pass over
        // keys of another type (Redis serves a blocked client only from a
        // key of the right type).
        let retry = blocked.op.clone().waiting_form();
        let waiter = BlockedWaiter::new(self.shared, blocked.op, retry);
        let this: &Self = self;
        // Its first run: a sweep (with the clients queued before it, first).
        blocked::serve_after_push(self.shared, this).await;
        match waiter.served::<T>().await {
            Turn::Served(reply) => return Some(reply),
            Turn::Waiting => {}
            Turn::Stopped => return None,
        }
        loop {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return match waiter.served::<T>().await {
                    Turn::Served(reply) => Some(reply),
                    // Redis answers every list wait that timed out with the
                    // nil array, BLMOVE's and BRPOPLPUSH's too (nil where
                    // they do not wait).
                    Turn::Waiting => Some(Frame::NullArray),
                    Turn::Stopped => None,
                };
            }
            let (tick, turn) = blocked::next_tick(self.shared.blocked_epoch, now);
            let next_try = deadline.map_or(turn, |d| d.min(turn));
            // Bounded: each turn ends at `next_try` or reads a chunk of
            // input, and input stops being read past its cap.
            loop {
                if self.shared.stopped.load(Ordering::Acquire) {
                    return None;
                }
                let now = Instant::now();
                if now >= next_try {
                    break;
                }
                let pause = T::sleep(next_try - now);
                if input.len() >= MAX_INPUT_WHILE_BLOCKED {
                    pause.await;
                    continue;
                }
                if input.capacity() - input.len() < READ_CHUNK_BYTES / 2 {
                    input.reserve(READ_CHUNK_BYTES);
                }
                tokio::select! {
                    read = stream.read_buf(input) => match read {
                        Ok(0) | Err(_) => return None,
                        Ok(_) => {}
                    },
                    () = pause => {}
                }
            }
            if next_try < turn {
                // Its timeout came first: answered at the top.
                continue;
            }
            match waiter.at_tick::<_, T>(tick, this).await {
                Turn::Served(reply) => return Some(reply),
                Turn::Waiting => {}
                Turn::Stopped => return None,
            }
        }
    }

    /// Writes a reply, counting its errors (INFO's `total_error_replies`
    /// and errorstats): the reply's own, or its elements' (an EXEC's
    /// failed commands).
    fn answer(&self, reply: &Frame, out: &mut Vec<u8>) {
        match reply {
            Frame::Error(message) => self.shared.stats.note_error(message),
            Frame::Array(elements) => {
                for element in elements {
                    if let Frame::Error(message) = element {
                        self.shared.stats.note_error(message);
                    }
                }
            }
            _ => {}
        }
        reply.encode(self.protocol, out);
    }

    /// Runs the batched data commands as one transaction.
    async fn flush(&mut self, batch: &mut Batch, out: &mut Vec<u8>) {
        if batch.ops.is_empty() {
            return;
        }
        batch.bytes = 0;
        // The next batch is likely as long as this one.
        let hint = batch.ops.len();
        let ops = std::mem::replace(&mut batch.ops, Vec::with_capacity(hint));
        let may_push = blocked::may_feed(self.shared, &ops);
        if batch.ships.is_empty() {
            let replies = self.run_here(ops).await;
            if may_push {
                blocked::serve_after_push(self.shared, &*self).await;
            }
            for reply in replies {
                self.answer(&reply, out);
            }
            return;
        }
        let ships = std::mem::take(&mut batch.ships);
        self.run_shipped(ops, ships, out).await;
        if may_push {
            blocked::serve_after_push(self.shared, &*self).await;
        }
    }

    /// Runs `ops` here as one transaction (one per command if the batch
    /// fails as a whole); one reply per command.
    async fn run_here(&self, ops: Vec<Op>) -> Vec<Frame> {
        let ops = Arc::new(ops);
        let replies = match self.shared.store.run(Arc::clone(&ops), None).await {
            Ok(Some(replies)) => replies,
            Ok(None) => unreachable!("nothing watched"),
            Err(_) if ops.len() > 1 => {
                let mut replies = Vec::with_capacity(ops.len());
                for op in ops.iter() {
                    let one = Arc::new(vec![op.clone()]);
                    replies.push(single_reply(self.shared.store.run(one, None).await));
                }
                replies
            }
            Err(e) => vec![transaction_failed(&e)],
        };
        debug_assert_eq!(replies.len(), ops.len(), "one reply per command");
        replies
    }

    /// A batch some of whose commands go to their owners: each owner gets
    /// its commands in one shipment, all shipped at once, the rest run
    /// here meanwhile, and the replies go out in the commands' order. The
    /// client saw none of these replies before sending them all, so running
    /// commands on different reactors in different places is a
    /// serialization it cannot tell apart; commands on one key keep their
    /// order (one reactor, one place).
    async fn run_shipped(
        &self,
        ops: Vec<Op>,
        mut ships: Vec<Option<(SocketAddr, Vec<u8>)>>,
        out: &mut Vec<u8>,
    ) {
        let n = ops.len();
        ships.resize_with(n, || None);
        let Some(forwarding) = self.shared.forwarding.as_ref() else {
            unreachable!("only a forwarding server ships");
        };
        let mut here: (Vec<usize>, Vec<Op>) = (Vec::new(), Vec::new());
        let mut owners: Vec<Shipment> = Vec::new();
        for (i, (op, ship)) in ops.into_iter().zip(ships).enumerate() {
            match ship {
                None => {
                    here.0.push(i);
                    here.1.push(op);
                }
                Some((to, raw)) => match owners.iter_mut().find(|o| o.0 == to) {
                    Some(owner) => {
                        owner.1.push(i);
                        owner.2.extend_from_slice(&raw);
                        owner.3.push(op);
                    }
                    None => owners.push((to, vec![i], raw, vec![op])),
                },
            }
        }
        let pending: Vec<_> = owners
            .iter_mut()
            .map(|(to, at, raw, _)| {
                forwarding.start(*to, self.protocol, std::mem::take(raw), at.len())
            })
            .collect();
        let mut pieces: Vec<Option<Piece>> = (0..n).map(|_| None).collect();
        let (at, local) = here;
        if !local.is_empty() {
            for (i, reply) in at.into_iter().zip(self.run_here(local).await) {
                pieces[i] = Some(Piece::Frame(reply));
            }
        }
        for ((to, at, _, ops), pending) in owners.into_iter().zip(pending) {
            match forwarding.finish(to, pending).await {
                Ok(replies) => {
                    debug_assert_eq!(replies.len(), at.len(), "one reply per command");
                    for (k, i) in at.into_iter().enumerate() {
                        pieces[i] = Some(Piece::Bytes(replies.get(k).to_vec()));
                    }
                }
                // Nothing reached the owner: run here.
                Err(ForwardError::NotSent { .. }) => {
                    for (i, reply) in at.into_iter().zip(self.run_here(ops).await) {
                        pieces[i] = Some(Piece::Frame(reply));
                    }
                }
                Err(e @ ForwardError::Unknown { .. }) => {
                    for i in at {
                        pieces[i] = Some(Piece::Frame(outcome_unknown(&e)));
                    }
                }
            }
        }
        for piece in pieces {
            match piece {
                Some(Piece::Frame(frame)) => self.answer(&frame, out),
                Some(Piece::Bytes(bytes)) => out.extend_from_slice(&bytes),
                None => unreachable!("every command answered"),
            }
        }
    }

    /// What to do with a request parsed in place (`spans` of `request`):
    /// the common data commands (GET, SET without options, INCR, DECR) are
    /// taken from the input directly, copying only their key and value;
    /// anything else goes through [`classify`](Self::classify).
    fn classify_in_place(&mut self, request: &[u8], spans: &[Range<usize>]) -> Step {
        let arg = |i: usize| &request[spans[i].clone()];
        let busy = self.shared.functions.scripting().is_busy();
        if let Some(index) = lookup_index(arg(0)).filter(|_| !busy) {
            let spec = &commands::COMMANDS[index];
            let may_run = spec.kind == Kind::Data
                && match &self.user {
                    Some((_, Access::ReadWrite)) => true,
                    Some((_, Access::ReadOnly)) => !spec.write,
                    None => false,
                };
            let op = match (spec.name, spans.len()) {
                _ if !may_run => None,
                ("get", 2) => fast_key(arg(1)).map(Op::Get),
                ("set", 3) => fast_key(arg(1)).and_then(|key| {
                    let value = arg(2);
                    (value.len() <= crate::store::MAX_VALUE_BYTES).then(|| Op::Set {
                        key,
                        value: value.into(),
                        cond: SetCond::Always,
                        get: false,
                        ttl: crate::expiry::SetTtl::Clear,
                    })
                }),
                ("incr", 2) => fast_key(arg(1)).map(|key| Op::IncrBy(key, 1)),
                ("decr", 2) => fast_key(arg(1)).map(|key| Op::IncrBy(key, -1)),
                _ => None,
            };
            if let Some(op) = op {
                self.count(Some(index));
                if spec.write && self.shared.forwarding.is_some() {
                    self.next_forward = self.route(&[arg(1)]).map(|to| (to, request.to_vec()));
                }
                return Step::Data(op);
            }
        }
        self.classify(
            spans
                .iter()
                .map(|span| request[span.clone()].to_vec())
                .collect(),
        )
    }

    /// What to do with one request.
    fn classify(&mut self, args: Args) -> Step {
        let index = lookup_index(&args[0]);
        self.count(index);
        let Some(spec) = index.map(|i| &commands::COMMANDS[i]) else {
            return self.reject(unknown_command(&args));
        };
        if !self.authenticated() && !spec.noauth {
            return self.reject(Frame::error(NOAUTH));
        }
        if !arity_ok(spec, args.len()) {
            return self.reject(wrong_arity(spec.name));
        }
        if let Some(busy) = self.shared.functions.scripting().busy_error() {
            if !crate::scripting::allowed_while_busy(spec.name, &args) {
                if spec.name == "exec" && self.multi.take().is_some() {
                    // Redis's EXEC refused by a busy script: the
                    // transaction is discarded, with the reason.
                    self.watched.clear();
                    self.client.info.multi.store(-1, Ordering::Relaxed);
                    self.shared
                        .stats
                        .exec_aborts
                        .fetch_add(1, Ordering::Relaxed);
                    let text = match &busy {
                        Frame::Error(text) => text.clone(),
                        other => format!("{other:?}"),
                    };
                    return Step::Reply(Frame::error(format!(
                        "EXECABORT Transaction discarded because of: {text}"
                    )));
                }
                return self.reject(busy);
            }
        }
        match spec.kind {
            Kind::Unsupported(why) => self.reject(Frame::error(why)),
            Kind::Data => {
                if spec.write && matches!(self.user, Some((_, Access::ReadOnly))) {
                    let user = self.user.as_ref().map_or("", |(name, _)| name.as_str());
                    return self.reject(Frame::error(format!(
                        "NOPERM User {user} has no permissions to run the '{}' command",
                        spec.name
                    )));
                }
                // A blocking command runs here: shipped, it would hold the
                // owner's forwarding link while it waits.
                if spec.write
                    && self.shared.forwarding.is_some()
                    && !crate::lists::is_blocking(spec.name)
                {
                    self.next_forward = self.route_command(spec, &args);
                }
                let op = commands::parse_op(spec, args, &self.shared.functions);
                if matches!(op, Op::Reply(_)) {
                    // Refused here already: its error is the reply.
                    self.next_forward = None;
                }
                if self.shared.site_counters.is_some() && spec.name.starts_with("bc.") {
                    if self.multi.is_some() {
                        return self.reject(Frame::error(
                            "ERR BC.* on a site runs at once, each its own operation: not inside MULTI",
                        ));
                    }
                    self.next_forward = None;
                    return Step::Site(op);
                }
                Step::Data(op)
            }
            Kind::Conn => Step::Conn(spec, args),
        }
    }

    /// An error for this command; inside MULTI it also dooms the EXEC.
    fn reject(&mut self, error: Frame) -> Step {
        if let Some(multi) = &mut self.multi {
            multi.dirty = true;
        }
        Step::Reply(error)
    }

    async fn run_step(&mut self, step: Step) -> Frame {
        match step {
            Step::Reply(frame) => frame,
            Step::Data(op) => self.queue(op),
            Step::Conn(spec, args) => self.connection_command(spec, &args).await,
            Step::Site(op) => self.site_command(op).await,
        }
    }

    /// BC.* through the site's counters.
    async fn site_command(&mut self, op: Op) -> Frame {
        let Some(sites) = self.shared.site_counters.as_ref() else {
            return Frame::error("ERR internal error: no site counters");
        };
        let key_of = |key: &[u8]| String::from_utf8(key.to_vec());
        let failed_reply = |e: String| Frame::error(format!("ERR {e}"));
        match op {
            Op::Reply(frame) => frame,
            Op::BcCreate {
                key,
                bound,
                k,
                initial,
            } => match key_of(&key) {
                Ok(key) => match sites.create(&key, bound, k, initial).await {
                    Ok(()) => Frame::ok(),
                    Err(e) => failed_reply(e),
                },
                Err(_) => Frame::error("ERR a site's counter key must be UTF-8"),
            },
            Op::BcAdd {
                key,
                up,
                delta,
                global,
            } => match key_of(&key) {
                Ok(key) => match sites.add(&key, up, delta, global).await {
                    Ok(outcome) => {
                        let value = match outcome {
                            crate::sites::SiteOutcome::Ok => sites.value_after_ok(&key).await,
                            _ => Ok(None),
                        };
                        crate::sites::outcome_reply(outcome, value)
                    }
                    Err(e) => failed_reply(e),
                },
                Err(_) => Frame::error("ERR a site's counter key must be UTF-8"),
            },
            Op::BcFence(failed) => match sites.fence_and_report(failed).await {
                Ok(reports) => Frame::Array(
                    reports
                        .into_iter()
                        .flat_map(|(key, report)| [Frame::bulk(key), Frame::bulk(report)])
                        .collect(),
                ),
                Err(e) => failed_reply(e),
            },
            Op::BcAdopt {
                failed,
                key,
                reports,
            } => {
                let reports: Result<Vec<String>, _> =
                    reports.into_iter().map(String::from_utf8).collect();
                match (key_of(&key), reports) {
                    (Ok(key), Ok(reports)) => match sites.adopt(failed, &key, reports).await {
                        Ok(n) => Frame::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
                        Err(e) => failed_reply(e),
                    },
                    _ => Frame::error("ERR keys and reports must be UTF-8"),
                }
            }
            Op::BcGet(key) => match key_of(&key) {
                Ok(key) => match sites.value(&key).await {
                    Ok(Some(value)) => Frame::Integer(value),
                    Ok(None) => Frame::Null,
                    Err(e) => failed_reply(e),
                },
                Err(_) => Frame::Null,
            },
            other => Frame::error(format!(
                "ERR internal error: {other:?} is not a site command"
            )),
        }
    }

    fn queue(&mut self, op: Op) -> Frame {
        let config = &self.shared.config;
        let (limit, byte_limit) = (config.max_multi_commands, config.max_multi_bytes);
        let multi = self.multi.as_mut().expect("queueing inside MULTI");
        if multi.ops.len() >= limit {
            multi.dirty = true;
            return Frame::error(format!(
                "ERR MULTI holds at most {limit} commands (max_multi_commands)"
            ));
        }
        let bytes = multi.bytes + op.payload_bytes();
        if bytes > byte_limit {
            multi.dirty = true;
            return Frame::error(format!(
                "ERR MULTI holds at most {byte_limit} bytes of keys and values (max_multi_bytes)"
            ));
        }
        multi.bytes = bytes;
        multi.ops.push(op);
        self.client
            .info
            .multi
            .store(multi.ops.len() as i64, Ordering::Relaxed);
        Frame::Simple("QUEUED".into())
    }

    async fn connection_command(&mut self, spec: &'static Spec, args: &Args) -> Frame {
        let in_multi = self.multi.is_some();
        match spec.name {
            "multi" if in_multi => Frame::error("ERR MULTI calls can not be nested"),
            "multi" => {
                self.multi = Some(Multi {
                    ops: Vec::new(),
                    bytes: 0,
                    dirty: false,
                    route: MultiRoute::Empty,
                });
                self.client.info.multi.store(0, Ordering::Relaxed);
                Frame::ok()
            }
            "exec" => {
                self.client.info.multi.store(-1, Ordering::Relaxed);
                self.exec().await
            }
            "discard" => match self.multi.take() {
                Some(_) => {
                    self.client.info.multi.store(-1, Ordering::Relaxed);
                    self.watched.clear();
                    Frame::ok()
                }
                None => Frame::error("ERR DISCARD without MULTI"),
            },
            "watch" if in_multi => Frame::error("ERR WATCH inside MULTI is not allowed"),
            "watch" => self.watch(&args[1..]).await,
            "quit" => {
                self.close = true;
                Frame::ok()
            }
            "reset" => {
                self.multi = None;
                self.client.info.multi.store(-1, Ordering::Relaxed);
                self.watched.clear();
                self.set_protocol(Protocol::Resp2);
                self.set_name(None);
                if self.shared.config.auth_required() {
                    self.user = None;
                    self.update_limits();
                }
                Frame::Simple("RESET".into())
            }
            // Redis's `no-multi` commands: refused when queued, which dooms
            // the transaction (EXECABORT).
            "save" | "bgsave" | "shutdown" if in_multi => {
                self.queued(Frame::error("ERR Command not allowed inside a transaction"))
            }
            "save" | "bgsave" => Frame::error(
                "ERR SAVE and BGSAVE are not needed: every Roost node keeps a log of the writes it \
                 applies (roost node --sync) and folds it into checkpoints in the background",
            ),
            "shutdown" => Frame::error(
                "ERR SHUTDOWN is not served over RESP: stop a node with SIGTERM (roost up stops its nodes)",
            ),
            "auth" if in_multi => self.queued(Frame::error("ERR AUTH inside MULTI is not allowed")),
            "hello" if in_multi => {
                self.queued(Frame::error("ERR HELLO inside MULTI is not allowed"))
            }
            "auth" => self.auth(&args[1..]),
            "hello" => self.hello(&args[1..]),
            _ => {
                // Other connection commands answer at once; inside MULTI their
                // reply is queued and given in its place at EXEC.
                let reply = self.simple_command(spec, args);
                if in_multi {
                    // Its error is its reply at EXEC, as a command's error
                    // at run time is in Redis (CONFIG SET of a bad value).
                    if let Some(multi) = &mut self.multi {
                        multi.route = MultiRoute::Local;
                    }
                    self.queue(Op::Reply(reply))
                } else {
                    reply
                }
            }
        }
    }

    fn queued(&mut self, reply: Frame) -> Frame {
        if reply.is_error() {
            // Redis rejects a command at queue time only for its name, arity
            // or permissions; ours are all answered here, so an error dooms
            // the transaction as well.
            if let Some(multi) = &mut self.multi {
                multi.dirty = true;
            }
            return reply;
        }
        if let Some(multi) = &mut self.multi {
            // Its reply is given here, at EXEC: the transaction runs here.
            multi.route = MultiRoute::Local;
        }
        self.queue(Op::Reply(reply))
    }

    /// Where a write command on `keys` runs, if not here (and, if here,
    /// the router is told so).
    fn route(&self, keys: &[&[u8]]) -> Option<SocketAddr> {
        let forwarding = self.shared.forwarding.as_ref()?;
        let n = self.shared.config.keyspace_reactors;
        let mut reactors: Vec<usize> = keys
            .iter()
            .map(|key| crate::store::keyspace_index(key, n))
            .collect();
        reactors.sort_unstable();
        reactors.dedup();
        let to = if self.may_forward {
            forwarding.router.route(&reactors)
        } else {
            None
        };
        if to.is_none() {
            forwarding.router.served(&reactors, !self.may_forward);
        }
        to
    }

    /// Where a write command runs if not here, with its bytes: commands
    /// whose keys the command table names, and scripts on declared keys
    /// (not the other commands with a `numkeys` argument, nor keyless ones).
    fn route_command(&self, spec: &Spec, args: &Args) -> Option<(SocketAddr, Vec<u8>)> {
        if matches!(spec.name, "eval" | "evalsha") {
            return self.route_script(spec, args);
        }
        if spec.first_key <= 0 || commands::numkeys_at(spec.name).is_some() {
            return None;
        }
        let first = spec.first_key as usize;
        let last = if spec.last_key < 0 {
            usize::try_from(args.len() as i64 + i64::from(spec.last_key)).ok()?
        } else {
            spec.last_key as usize
        };
        let step = spec.step.max(1) as usize;
        let keys: Vec<&[u8]> = (first..=last.min(args.len().saturating_sub(1)))
            .step_by(step)
            .map(|i| args[i].as_slice())
            .collect();
        if keys.is_empty() {
            return None;
        }
        let to = self.route(&keys)?;
        let mut raw = Vec::new();
        crate::forward::encode_command(args, &mut raw);
        Some((to, raw))
    }

    /// Where a script on declared keys runs if not here, with its bytes.
    /// An EVALSHA travels as the EVAL of its body, so the owner need not
    /// have loaded it (one this node does not know runs here: NOSCRIPT).
    /// FCALL runs here: libraries are loaded node by node.
    fn route_script(&self, spec: &Spec, args: &Args) -> Option<(SocketAddr, Vec<u8>)> {
        let numkeys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
        let keys = args.get(3..3usize.checked_add(numkeys)?)?;
        if keys.is_empty() {
            return None;
        }
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let to = self.route(&keys)?;
        let mut raw = Vec::new();
        if spec.name == "evalsha" {
            let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
            let body = self.shared.functions.scripting().script(&sha)?;
            let mut shipped = args.clone();
            shipped[0] = b"EVAL".to_vec();
            shipped[1] = body.to_vec();
            crate::forward::encode_command(&shipped, &mut raw);
        } else {
            crate::forward::encode_command(args, &mut raw);
        }
        Some((to, raw))
    }

    /// Ships `raw` (`replies` commands) to their owner.
    async fn forward(
        &self,
        to: SocketAddr,
        raw: Vec<u8>,
        replies: usize,
    ) -> Result<crate::forward::Replies, ForwardError> {
        let forwarding = self
            .shared
            .forwarding
            .as_ref()
            .ok_or(ForwardError::NotSent {
                to,
                why: "this server forwards nothing".into(),
            })?;
        forwarding.forward(to, self.protocol, raw, replies).await
    }

    /// EXEC of a transaction whose every command is a write on reactors one
    /// other node owns: shipped there whole (MULTI, the commands, EXEC),
    /// its reply being EXEC's there. `None`: it runs here (WATCHed keys
    /// are compared here, so such a transaction always does).
    async fn forward_exec(&mut self) -> Option<Vec<u8>> {
        let multi = self.multi.as_ref()?;
        if multi.dirty || !self.watched.is_empty() || !matches!(multi.route, MultiRoute::To(..)) {
            return None;
        }
        let Some(Multi {
            ops,
            route: MultiRoute::To(to, queued),
            ..
        }) = self.multi.take()
        else {
            unreachable!("checked above");
        };
        let mut raw = Vec::with_capacity(queued.len() + 32);
        crate::forward::encode_command(&[&b"MULTI"[..]], &mut raw);
        raw.extend_from_slice(&queued);
        crate::forward::encode_command(&[&b"EXEC"[..]], &mut raw);
        let replies = ops.len() + 2;
        match self.forward(to, raw, replies).await {
            // MULTI's +OK and each +QUEUED come first: EXEC's reply is
            // the last.
            Ok(answers) => Some(answers.get(replies - 1).to_vec()),
            Err(ForwardError::NotSent { .. }) => {
                // Run here after all.
                self.multi = Some(Multi {
                    bytes: 0,
                    dirty: false,
                    route: MultiRoute::Local,
                    ops,
                });
                None
            }
            Err(e @ ForwardError::Unknown { .. }) => {
                let mut out = Vec::new();
                self.answer(&outcome_unknown(&e), &mut out);
                Some(out)
            }
        }
    }

    async fn exec(&mut self) -> Frame {
        let Some(multi) = self.multi.take() else {
            return Frame::error("ERR EXEC without MULTI");
        };
        let watched = std::mem::take(&mut self.watched);
        let stats = &self.shared.stats;
        if multi.dirty {
            stats.exec_aborts.fetch_add(1, Ordering::Relaxed);
            return Frame::error("EXECABORT Transaction discarded because of previous errors.");
        }
        let watched = (!watched.is_empty()).then(|| Arc::new(watched));
        let may_push = blocked::may_feed(self.shared, &multi.ops);
        let outcome = self.shared.store.run(Arc::new(multi.ops), watched).await;
        if may_push && matches!(outcome, Ok(Some(_))) {
            blocked::serve_after_push(self.shared, &*self).await;
        }
        match outcome {
            Ok(Some(replies)) => Frame::Array(replies),
            Ok(None) => {
                stats.watch_aborts.fetch_add(1, Ordering::Relaxed);
                Frame::NullArray
            }
            Err(e) => transaction_failed(&e),
        }
    }

    async fn watch(&mut self, keys: &[Vec<u8>]) -> Frame {
        if let Err(error) = commands::check_keys(keys) {
            return error;
        }
        // The first WATCH of a key is what EXEC compares with: only keys not
        // watched yet (once each) are read and added.
        let mut seen: HashSet<&[u8]> = self.watched.iter().map(|(k, _)| k.as_slice()).collect();
        let new: Vec<Vec<u8>> = keys
            .iter()
            .filter(|key| seen.insert(key.as_slice()))
            .cloned()
            .collect();
        let limit = self.shared.config.max_watched_keys;
        if self.watched.len() + new.len() > limit {
            return Frame::error(format!(
                "ERR WATCH holds at most {limit} keys per connection (max_watched_keys)"
            ));
        }
        if new.is_empty() {
            return Frame::ok();
        }
        let op = Op::Stamps(new.clone());
        match single_reply(self.shared.store.run(Arc::new(vec![op]), None).await) {
            Frame::Array(stamps) => {
                for (key, stamp) in new.into_iter().zip(stamps) {
                    let stamp = match stamp {
                        Frame::Integer(s) => Some(s as u64),
                        _ => None,
                    };
                    self.watched.push((key, stamp));
                }
                Frame::ok()
            }
            error => error,
        }
    }

    /// `name` authenticated (AUTH, HELLO AUTH): its access, its limits, and
    /// whether its writes may be shipped (not the forward user's).
    fn log_in(&mut self, name: String, access: Access) {
        self.may_forward = self.shared.forwarding.is_some() && name != crate::forward::FORWARD_USER;
        self.client.info.set_user(&name);
        self.user = Some((name, access));
        self.update_limits();
    }

    fn auth(&mut self, args: &[Vec<u8>]) -> Frame {
        let config = &self.shared.config;
        let (name, password) = match args {
            [password] => {
                if config.requirepass.is_none() {
                    return Frame::error(
                        "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
                    );
                }
                ("default".to_owned(), password)
            }
            [name, password] => (String::from_utf8_lossy(name).into_owned(), password),
            _ => return Frame::error("ERR syntax error"),
        };
        match config.authenticate(&name, password) {
            Some(access) => {
                self.log_in(name, access);
                Frame::ok()
            }
            None => Frame::error(WRONGPASS),
        }
    }

    /// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
    fn hello(&mut self, args: &[Vec<u8>]) -> Frame {
        let mut protocol = self.protocol;
        let mut rest = args;
        if let Some((version, tail)) = args.split_first() {
            protocol = match crate::store::parse_i64(version) {
                Some(2) => Protocol::Resp2,
                Some(3) => Protocol::Resp3,
                Some(_) => return Frame::error("NOPROTO unsupported protocol version"),
                None => {
                    return Frame::error("ERR Protocol version is not an integer or out of range")
                }
            };
            rest = tail;
        }
        let mut credentials = None;
        let mut name = None;
        while let Some((option, tail)) = rest.split_first() {
            if option.eq_ignore_ascii_case(b"auth") && tail.len() >= 2 {
                credentials = Some((tail[0].clone(), tail[1].clone()));
                rest = &tail[2..];
            } else if option.eq_ignore_ascii_case(b"setname") && !tail.is_empty() {
                if let Err(e) = check_client_name(&tail[0]) {
                    return e;
                }
                name = Some(tail[0].clone());
                rest = &tail[1..];
            } else {
                return Frame::error(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(option)
                ));
            }
        }
        if let Some((user, password)) = credentials {
            let user = String::from_utf8_lossy(&user).into_owned();
            match self.shared.config.authenticate(&user, &password) {
                Some(access) => self.log_in(user, access),
                None => return Frame::error(WRONGPASS),
            }
        }
        if !self.authenticated() {
            return Frame::error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        }
        if name.is_some() {
            self.set_name(name);
        }
        self.set_protocol(protocol);
        let version = match protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        };
        Frame::Map(vec![
            (Frame::bulk("server"), Frame::bulk("redis")),
            (Frame::bulk("version"), Frame::bulk(crate::REDIS_VERSION)),
            (Frame::bulk("proto"), Frame::Integer(version)),
            (Frame::bulk("id"), Frame::Integer(self.id as i64)),
            (Frame::bulk("mode"), Frame::bulk("standalone")),
            (Frame::bulk("role"), Frame::bulk("master")),
            (Frame::bulk("modules"), Frame::Array(Vec::new())),
        ])
    }

    /// `ROOST.OWNER key...`: per key, `[reactor, node, resp_addr]`, the
    /// last two nil where this node does not know the owner (or it serves
    /// no clients).
    fn owners(&self, keys: &[Vec<u8>]) -> Frame {
        let k = self.shared.config.keyspace_reactors;
        let directory = self.shared.directory.as_deref();
        Frame::Array(
            keys.iter()
                .map(|key| {
                    let reactor = crate::store::keyspace_index(key, k);
                    let owner = directory.and_then(|d| d.owner(reactor));
                    Frame::Array(vec![
                        Frame::Integer(reactor as i64),
                        owner.map_or(Frame::Null, |o| Frame::Integer(i64::from(o.node))),
                        owner
                            .and_then(|o| o.resp_addr)
                            .map_or(Frame::Null, |a| Frame::bulk(a.to_string())),
                    ])
                })
                .collect(),
        )
    }

    /// Connection and server commands with no effect on transactions.
    fn simple_command(&mut self, spec: &'static Spec, args: &Args) -> Frame {
        let arg = |i: usize| args.get(i).map(|a| a.to_ascii_lowercase());
        match spec.name {
            "ping" => match args.len() {
                1 => Frame::Simple("PONG".into()),
                2 => Frame::Bulk(args[1].clone()),
                _ => wrong_arity("ping"),
            },
            "echo" => Frame::Bulk(args[1].clone()),
            "roost.owner" => self.owners(&args[1..]),
            "time" => admin::time(),
            "select" => match crate::store::parse_i64(&args[1]) {
                Some(0) => Frame::ok(),
                Some(_) => Frame::error("ERR DB index is out of range"),
                None => Frame::error(crate::store::NOT_INTEGER),
            },
            "client" => match arg(1).as_deref() {
                Some(b"setname") if args.len() == 3 => match check_client_name(&args[2]) {
                    Ok(()) => {
                        self.set_name((!args[2].is_empty()).then(|| args[2].clone()));
                        Frame::ok()
                    }
                    Err(e) => e,
                },
                Some(b"getname") if args.len() == 2 => self
                    .client
                    .info
                    .name
                    .lock()
                    .expect("client name")
                    .clone()
                    .map_or(Frame::Null, Frame::Bulk),
                Some(b"id") if args.len() == 2 => Frame::Integer(self.id as i64),
                Some(b"setname" | b"getname" | b"id") => {
                    commands::wrong_subcommand_arity("client", &args[1])
                }
                _ => admin::client(self.shared, &self.client.info, args),
            },
            "config" => {
                let read_only = match &self.user {
                    Some((name, Access::ReadOnly)) => Some(name.as_str()),
                    _ => None,
                };
                admin::config(self.shared, args, read_only)
            }
            "info" => admin::info(self.shared, &args[1..]),
            "function" => self.function(args),
            "script" => self.shared.functions.scripting().script_command(args),
            "command" => admin::command(args),
            "unwatch" => {
                // Inside MULTI, UNWATCH runs at EXEC, after the watch check.
                if self.multi.is_none() {
                    self.watched.clear();
                }
                Frame::ok()
            }
            other => unreachable!("connection command `{other}` without a handler"),
        }
    }

    /// `FUNCTION LIST`, `HELP`, and `LOAD`/`DELETE`/`FLUSH` of Lua
    /// libraries (the Rust functions are the application's: they stay).
    fn function(&self, args: &Args) -> Frame {
        let sub = args[1].to_ascii_lowercase();
        let changes = matches!(sub.as_slice(), b"load" | b"delete" | b"flush" | b"restore");
        if changes && matches!(self.user, Some((_, Access::ReadOnly))) {
            let user = self.user.as_ref().map_or("", |(name, _)| name.as_str());
            return Frame::error(format!(
                "NOPERM User {user} has no permissions to run the 'function|{}' command",
                String::from_utf8_lossy(&sub)
            ));
        }
        let scripting = self.shared.functions.scripting();
        match sub.as_slice() {
            b"list" => self.shared.functions.list(&args[2..]),
            b"load" if args.len() >= 3 => {
                // Redis 7.0: options, then the code, last.
                let (code, options) = args[2..].split_last().expect("at least one");
                let mut replace = false;
                for option in options {
                    if !option.eq_ignore_ascii_case(b"replace") {
                        return Frame::error(format!(
                            "ERR Unknown option given: {}",
                            String::from_utf8_lossy(option)
                        ));
                    }
                    replace = true;
                }
                let functions = &self.shared.functions;
                match scripting
                    .load_library(code, replace, &|name| functions.has_rust_function(name))
                {
                    Ok(name) => Frame::bulk(name),
                    Err(e) => Frame::error(e.to_string()),
                }
            }
            b"delete" if args.len() == 3 => {
                if scripting.delete_library(&args[2]) {
                    Frame::ok()
                } else {
                    Frame::error("ERR Library not found")
                }
            }
            b"flush" if args.len() == 2 => {
                scripting.flush_libraries();
                Frame::ok()
            }
            b"flush" if args.len() == 3 => {
                if !(args[2].eq_ignore_ascii_case(b"sync")
                    || args[2].eq_ignore_ascii_case(b"async"))
                {
                    return Frame::error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
                }
                scripting.flush_libraries();
                Frame::ok()
            }
            // Redis names the subcommand as it was typed here.
            b"flush" => Frame::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
                String::from_utf8_lossy(&args[1])
            )),
            b"kill" if args.len() == 2 => scripting.kill(false),
            b"stats" if args.len() == 2 => scripting.stats(),
            b"dump" if args.len() == 2 => Frame::Bulk(scripting.dump()),
            b"restore" if args.len() == 3 || args.len() == 4 => {
                let policy = match args.get(3).map(|a| a.to_ascii_lowercase()).as_deref() {
                    None | Some(b"append") => crate::scripting::RestorePolicy::Append,
                    Some(b"flush") => crate::scripting::RestorePolicy::Flush,
                    Some(b"replace") => crate::scripting::RestorePolicy::Replace,
                    Some(_) => {
                        return Frame::error(
                            "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                        )
                    }
                };
                let functions = &self.shared.functions;
                match scripting.restore(&args[2], policy, &|name| functions.has_rust_function(name))
                {
                    Ok(()) => Frame::ok(),
                    Err(error) => error,
                }
            }
            b"restore" if args.len() < 3 => {
                crate::commands::wrong_subcommand_arity("function", &args[1])
            }
            b"restore" => Frame::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
                String::from_utf8_lossy(&args[1])
            )),
            b"load" | b"delete" | b"kill" | b"dump" | b"stats" => {
                crate::commands::wrong_subcommand_arity("function", &args[1])
            }
            b"help" => Frame::Array(
                [
                    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "LOAD [REPLACE] <library code>",
                    "    Loads a Lua library (#!lua name=<library>, redis.register_function).",
                    "DELETE <library name>",
                    "    Deletes a Lua library.",
                    "FLUSH [ASYNC|SYNC]",
                    "    Deletes every Lua library.",
                    "LIST [LIBRARYNAME <pattern>] [WITHCODE]",
                    "    The Lua libraries (and, named by LIBRARYNAME, the Rust ones).",
                    "DUMP",
                    "    A payload of every Lua library, for RESTORE.",
                    "RESTORE <payload> [FLUSH|APPEND|REPLACE]",
                    "    Loads the libraries of a DUMP payload (APPEND by default).",
                    "KILL",
                    "    Stops the function running past the time limit (it applies nothing).",
                    "STATS",
                    "    The function running past the time limit, and the libraries' counts.",
                    "Roost's functions are registered by the application when the server starts",
                    "(Rust, see roost_resp::Functions); call them with FCALL and FCALL_RO.",
                ]
                .into_iter()
                .map(|line| Frame::Simple(line.into()))
                .collect(),
            ),
            _ => Frame::error(format!(
                "ERR unknown subcommand '{}'. Try FUNCTION HELP.",
                String::from_utf8_lossy(&args[1])
            )),
        }
    }
}

fn check_client_name(name: &[u8]) -> Result<(), Frame> {
    if name.len() > MAX_CLIENT_NAME_BYTES || name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(Frame::error(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

/// A key the fast path accepts (a longer one takes the general path, which
/// answers the error).
fn fast_key(key: &[u8]) -> Option<Vec<u8>> {
    (key.len() <= crate::store::MAX_KEY_BYTES).then(|| key.to_vec())
}

/// Commands counted by a connection and not yet added to the shared
/// statistics (atomics shared by every connection cost more than a local
/// count).
#[derive(Default)]
struct Tally {
    total: u64,
    /// The last command counted, and how many times in a row.
    run: Option<(usize, u64)>,
}

/// A blocking command (BLPOP and its kin) outside MULTI, waiting to pop.
struct Blocked {
    /// Its non-blocking form: answers nil or the nil array when it pops
    /// nothing.
    op: Op,
    /// 0: no timeout.
    timeout_ms: u64,
}

impl RunOps for Connection<'_> {
    async fn run_ops(&self, ops: Vec<Op>) -> Vec<Frame> {
        self.run_here(ops).await
    }
}

/// Whose timers a connection sleeps on (a blocked command between tries):
/// the executor's that serves it ([`ExecutorTimers`]), or tokio's for the
/// connections a tokio runtime serves ([`TokioTimers`], a site's). A type
/// rather than a check at run time: the executor's sleep is not `Send`,
/// and a tokio task's future must be.
pub(crate) trait Timers {
    type Sleep: std::future::Future<Output = ()>;
    fn sleep(duration: Duration) -> Self::Sleep;
}

pub(crate) struct ExecutorTimers;

impl Timers for ExecutorTimers {
    type Sleep = roost_exec::Sleep;
    fn sleep(duration: Duration) -> roost_exec::Sleep {
        roost_exec::sleep(duration)
    }
}

pub(crate) struct TokioTimers;

impl Timers for TokioTimers {
    type Sleep = tokio::time::Sleep;
    fn sleep(duration: Duration) -> tokio::time::Sleep {
        tokio::time::sleep(duration)
    }
}

/// What one request asks for.
enum Step {
    /// Answer with this (an error, mostly).
    Reply(Frame),
    /// A data command: batched, or queued inside MULTI.
    Data(Op),
    Conn(&'static Spec, Args),
    /// A bounded-counter command for the site's counters (a node that is a
    /// site of a geo-replicated deployment).
    Site(Op),
}

/// The reply to a command shipped to its owner with no reply back.
fn outcome_unknown(error: &ForwardError) -> Frame {
    Frame::error(format!(
        "ERR the command was shipped to its keys' owner and its outcome is unknown ({error})"
    ))
}

fn single_reply(outcome: BatchOutcome) -> Frame {
    match outcome {
        Ok(Some(mut replies)) if replies.len() == 1 => replies.pop().expect("one reply"),
        Ok(_) => Frame::error("ERR internal error: no reply"),
        Err(e) => transaction_failed(&e),
    }
}

/// The error answer of a failed transaction, saying what became of it: a
/// reactor that could not be brought here is `TRYAGAIN` (as Redis Cluster
/// answers while slots move: nothing applied, ask again); any other error
/// before the commit says nothing was applied; one after it (a replication
/// that failed) says the outcome is unknown, so a client neither retries a
/// write that may have landed nor counts it as lost.
fn transaction_failed(error: &roost_reactor::ReactorError) -> Frame {
    match error {
        roost_reactor::ReactorError::Unavailable { .. } => Frame::error(format!(
            "TRYAGAIN transaction aborted, nothing applied: {error}"
        )),
        roost_reactor::ReactorError::Replication(
            cause @ roost_reactor::ReplicationError::NotServing,
        ) => Frame::error(format!(
            "TRYAGAIN transaction aborted, nothing applied: {cause}"
        )),
        _ if error.applied_nothing() => {
            Frame::error(format!("ERR transaction aborted, nothing applied: {error}"))
        }
        _ => Frame::error(format!("ERR transaction outcome unknown: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roost_reactor::{Conflict, ConflictKind, ReactorError, TxError};

    #[test]
    fn an_abort_on_the_wire_names_the_reactor_and_key_that_conflicted() {
        let mut last = Conflict::at(ConflictKind::ReadValidation, "kv/keyspace/kv", Some(b"hot"));
        if let Some(at) = last.at.as_deref_mut() {
            at.reactor = Some(3);
            at.reactor_name = Some("keyspace/k3".into());
        }
        let error = ReactorError::Tx(TxError::RetriesExhausted { attempts: 64, last });
        let Frame::Error(text) = transaction_failed(&error) else {
            panic!("an error frame");
        };
        assert!(
            text.starts_with("ERR transaction aborted, nothing applied"),
            "{text}"
        );
        assert!(
            text.contains("reactor `keyspace/k3`, key \"hot\""),
            "{text}"
        );
    }
}

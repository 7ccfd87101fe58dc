//! Handover, the Zeus seed's cellular control plane
//! (`../shared/reference/benchmarks.md` §1.5), over a Roost cluster's RESP
//! ports, three ways (as [`crate::smallbank`]): `roost` (a transaction runs
//! where its phone's reactor is routed; ownership moves what it lacks),
//! `static-2pc` (nothing moves; a transaction across two nodes is a
//! client-driven two-phase commit) and `perfect` (no phone ever leaves its
//! node's base stations).
//!
//! Objects, each in a reactor of its own (a hash tag per object): a phone's
//! session (`s`, 272 B: its state, primary and secondary base station and
//! 200 B of data, what the MME replicates), a base station (`e`, 56 B) and,
//! in the base station's reactor, the phone's context there (`c:<phone>`,
//! 24 B). Transactions: *service request* (the phone attaches to its
//! current base station: the context inserted, the session rewritten),
//! *release* (the context deleted, the session idle), and a *handover* as
//! two transactions: *start* (the destination read, a context inserted
//! there, the session names it secondary) and *finish* (the old context
//! deleted, the secondary becomes primary). About 300-400 B written per
//! transaction.
//!
//! A fraction of the phones (`moving`) hand over to the next node's base
//! stations and back (a ring, as the seed's trace generator does); the
//! others hand over between their own node's stations. A moved phone's
//! later transactions touch its session (home node) and a station of the
//! other node: Roost moves the session once; static sharding runs a 2PC
//! every time.
//!
//! **Checked, not assumed.** Each client keeps what its phones' sessions
//! must say; after a run every session and every context is read back and
//! compared.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_client::{redis, Cmd, NodeAddr, Router, Value};

pub use crate::cluster_load::System;
use crate::cluster_load::{
    back_off, evalsha, latency_histogram, load_script, mset, query, record, send_all, NodeError,
};

/// Tries of a static-2PC transaction whose prepare met a lock.
const MAX_2PC_TRIES: u32 = 64;
/// The session's opaque part (what the MME replicates).
const SESSION_DATA_BYTES: usize = 200;

/// Workload sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub phones_per_node: u64,
    pub stations_per_node: u64,
    /// Share of transactions that are handovers (each two transactions).
    pub handover_fraction: f64,
    /// Share of each node's phones that hand over to the next node and back.
    pub moving_fraction: f64,
}

/// Where the objects live: one tag (reactor) each.
pub struct Layout {
    pub params: Params,
    pub nodes: Vec<NodeAddr>,
    /// Per node: the tags of its phones, then of its stations.
    tags: Vec<Vec<String>>,
}

impl Layout {
    /// `owned[p]`: the tags of reactors node `p` owns; it needs one per
    /// phone and station of the node.
    pub fn new(
        params: Params,
        nodes: Vec<NodeAddr>,
        owned: Vec<Vec<String>>,
    ) -> Result<Layout, String> {
        let need = (params.phones_per_node + params.stations_per_node) as usize;
        if let Some((p, tags)) = owned.iter().enumerate().find(|(_, t)| t.len() < need) {
            return Err(format!(
                "node {p} owns {} reactors, fewer than its {need} phones and base stations: more --reactors",
                tags.len()
            ));
        }
        Ok(Layout {
            params,
            nodes,
            tags: owned.into_iter().map(|t| t[..need].to_vec()).collect(),
        })
    }

    pub fn phones(&self) -> u64 {
        self.params.phones_per_node * self.nodes.len() as u64
    }

    /// A phone's home node (by position) and index there.
    fn home(&self, phone: u64) -> (usize, u64) {
        let n = self.params.phones_per_node;
        ((phone / n) as usize, phone % n)
    }

    fn phone_tag(&self, phone: u64) -> &str {
        let (p, i) = self.home(phone);
        &self.tags[p][i as usize]
    }

    /// Station `j` of node `p`.
    fn station_tag(&self, p: usize, j: u64) -> &str {
        &self.tags[p][(self.params.phones_per_node + j) as usize]
    }

    pub fn session_key(&self, phone: u64) -> String {
        format!("ho:{{{}}}:s", self.phone_tag(phone))
    }

    fn station_key(&self, s: Station) -> String {
        format!("ho:{{{}}}:e", self.station_tag(s.node, s.index))
    }

    /// The phone's context at station `s` (kept with the phone).
    pub fn context_key(&self, s: Station, phone: u64) -> String {
        format!("ho:{{{}}}:c:{}", self.phone_tag(phone), s.id(self))
    }

    fn is_moving(&self, phone: u64) -> bool {
        let (_, i) = self.home(phone);
        (i as f64) < self.params.moving_fraction * self.params.phones_per_node as f64
    }

    /// Every tag in use.
    pub fn all_tags(&self) -> impl Iterator<Item = &String> {
        self.tags.iter().flatten()
    }
}

/// A base station: its node (by position) and index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Station {
    pub node: usize,
    pub index: u64,
}

impl Station {
    fn id(self, layout: &Layout) -> u64 {
        self.node as u64 * layout.params.stations_per_node + self.index
    }
}

/// What a phone's session says (and the client expects it to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    Idle { station: Station },
    Attached { station: Station },
    HandingOver { from: Station, to: Station },
}

impl Session {
    pub fn encode(self, layout: &Layout) -> String {
        let (state, a, b) = match self {
            Session::Idle { station } => ('I', station.id(layout), station.id(layout)),
            Session::Attached { station } => ('A', station.id(layout), station.id(layout)),
            Session::HandingOver { from, to } => ('H', from.id(layout), to.id(layout)),
        };
        format!("{state}|{a}|{b}|{}", "d".repeat(SESSION_DATA_BYTES))
    }
}

/// What a transaction does to one key: `SET` it, `DEL` it, or add to it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum WriteOp {
    Set(String),
    Del,
    Add(i64),
}

impl WriteOp {
    /// As the scripts take it: "" deletes, "+N"/"-N" adds, else a value.
    fn arg(&self) -> String {
        match self {
            WriteOp::Set(v) => v.clone(),
            WriteOp::Del => String::new(),
            WriteOp::Add(n) => format!("{n:+}"),
        }
    }
}

/// One write: the tag (object) of its key, the key, what it does.
#[derive(Debug, Clone)]
struct Write {
    tag: String,
    key: String,
    op: WriteOp,
}

/// One transaction: the phone, its session after, its writes; the first
/// write's key is what the router routes by.
struct Txn {
    after: Session,
    writes: Vec<Write>,
}

/// Every object's initial value, at the node owning it: sessions idle at a
/// station of their home node, stations with no phone attached.
pub fn load(
    router: &mut Router,
    layout: &Layout,
    owner_of_tag: &HashMap<String, u32>,
) -> Result<(), NodeError> {
    let mut by_node: HashMap<u32, Vec<String>> = HashMap::new();
    for phone in 0..layout.phones() {
        let session = Session::Idle {
            station: first_station(layout, phone),
        };
        by_node
            .entry(owner_of_tag[layout.phone_tag(phone)])
            .or_default()
            .extend([layout.session_key(phone), session.encode(layout)]);
    }
    for node in 0..layout.nodes.len() {
        for j in 0..layout.params.stations_per_node {
            let s = Station { node, index: j };
            by_node
                .entry(owner_of_tag[layout.station_tag(node, j)])
                .or_default()
                .extend([layout.station_key(s), "0".to_owned()]);
        }
    }
    for (node, pairs) in by_node {
        for chunk in pairs.chunks(4_000) {
            mset(router, node, chunk)?;
        }
    }
    Ok(())
}

fn first_station(layout: &Layout, phone: u64) -> Station {
    let (p, i) = layout.home(phone);
    Station {
        node: p,
        index: i % layout.params.stations_per_node,
    }
}

/// One client's tally and its phones' expected sessions.
#[derive(Debug)]
pub struct ClientResult {
    pub committed: u64,
    pub handovers: u64,
    /// Transactions that touched two nodes' objects (as placed at the start).
    pub cross: u64,
    pub conflicts: u64,
    pub latency_ns: Histogram<u64>,
    pub expected: Vec<(u64, Session)>,
    pub error: Option<String>,
}

/// Applies `writes` and (static-2PC) checks/takes no lock: one script.
const APPLY: &str = "for i = tonumber(ARGV[1]) + 1, #KEYS do \
       if redis.call('EXISTS', KEYS[i]) == 1 then return 2 end end \
     for i = 1, tonumber(ARGV[1]) do \
       local v = ARGV[i + 1] local c = string.sub(v, 1, 1) \
       if v == '' then redis.call('DEL', KEYS[i]) \
       elseif c == '+' or c == '-' then redis.call('INCRBY', KEYS[i], tonumber(v)) \
       else redis.call('SET', KEYS[i], v) end \
     end return 1";
/// Prepare: takes every lock named (KEYS) for ARGV[1], or none.
const PREPARE: &str = "for i = 1, #KEYS do \
       if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end end \
     for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[1]) end return 1";
/// Commit: applies the writes (the first ARGV[1] keys) and releases the
/// locks after them.
const COMMIT: &str = "local n = tonumber(ARGV[1]) \
     for i = n + 1, #KEYS do if redis.call('GET', KEYS[i]) ~= ARGV[n + 2] then \
       return redis.error_reply('2PC lock lost') end end \
     for i = 1, n do \
       local v = ARGV[i + 1] local c = string.sub(v, 1, 1) \
       if v == '' then redis.call('DEL', KEYS[i]) \
       elseif c == '+' or c == '-' then redis.call('INCRBY', KEYS[i], tonumber(v)) \
       else redis.call('SET', KEYS[i], v) end \
     end \
     for i = n + 1, #KEYS do redis.call('DEL', KEYS[i]) end return 1";
/// Release: drops the locks (KEYS) this transaction (ARGV[1]) holds.
const RELEASE: &str = "for i = 1, #KEYS do if redis.call('GET', KEYS[i]) == ARGV[1] then \
       redis.call('DEL', KEYS[i]) end end return 1";

/// Bugs planted to show that the session check catches a lost write
/// (`cli/tests/handover.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlantedBugs {
    /// Roost's way drops a handover finish's session write.
    pub lose_finish_session: bool,
}

/// The scripts' SHA-1s, loaded at every node, and the planted bugs.
#[derive(Debug, Clone)]
pub struct Scripts {
    pub bugs: PlantedBugs,
    apply: String,
    prepare: String,
    commit: String,
    release: String,
}

impl Scripts {
    /// SCRIPT LOAD of every script at every node of `router`.
    pub fn load(router: &mut Router) -> Result<Scripts, NodeError> {
        Ok(Scripts {
            bugs: PlantedBugs::default(),
            apply: load_script(router, APPLY)?,
            prepare: load_script(router, PREPARE)?,
            commit: load_script(router, COMMIT)?,
            release: load_script(router, RELEASE)?,
        })
    }
}

/// The next transaction for `phone`, whose session says `now`. Each runs at
/// a station (its first write: the station's attach counter) with the
/// phone's session and contexts, which live in the phone's reactor:
/// service request and release at the current station, handover start at
/// the destination; the finish touches the phone's reactor only.
fn next_txn(layout: &Layout, phone: u64, now: Session, system: System, rng: &mut SmallRng) -> Txn {
    let ptag = layout.phone_tag(phone).to_owned();
    let session = |after: Session| Write {
        tag: ptag.clone(),
        key: layout.session_key(phone),
        op: WriteOp::Set(after.encode(layout)),
    };
    let context = |s: Station, op: WriteOp| Write {
        tag: ptag.clone(),
        key: layout.context_key(s, phone),
        op,
    };
    let station = |s: Station, delta: i64| Write {
        tag: layout.station_tag(s.node, s.index).to_owned(),
        key: layout.station_key(s),
        op: WriteOp::Add(delta),
    };
    let handover = rng.random_bool(layout.params.handover_fraction);
    let (after, writes) = match now {
        Session::HandingOver { from, to } => {
            let after = Session::Attached { station: to };
            (after, vec![session(after), context(from, WriteOp::Del)])
        }
        Session::Attached { station: from } | Session::Idle { station: from } if handover => {
            let home = layout.home(phone).0;
            let nodes = layout.nodes.len();
            let to_node = if system != System::Perfect && layout.is_moving(phone) && nodes > 1 {
                // The ring: away to the next node, then back home.
                if from.node == home {
                    (home + 1) % nodes
                } else {
                    home
                }
            } else {
                from.node
            };
            let mut to = Station {
                node: to_node,
                index: rng.random_range(0..layout.params.stations_per_node),
            };
            if to == from && layout.params.stations_per_node > 1 {
                to.index = (to.index + 1) % layout.params.stations_per_node;
            }
            let after = Session::HandingOver { from, to };
            (
                after,
                vec![
                    station(to, 1),
                    context(to, WriteOp::Set(format!("{phone:0>24}"))),
                    session(after),
                ],
            )
        }
        Session::Idle { station: at } => {
            let after = Session::Attached { station: at };
            (
                after,
                vec![
                    station(at, 1),
                    context(at, WriteOp::Set(format!("{phone:0>24}"))),
                    session(after),
                ],
            )
        }
        Session::Attached { station: at } => {
            let after = Session::Idle { station: at };
            (
                after,
                vec![station(at, -1), context(at, WriteOp::Del), session(after)],
            )
        }
    };
    Txn { after, writes }
}

/// Why a transaction failed.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    #[error(transparent)]
    Route(#[from] roost_client::RouteError),
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("node {node} answered {what} with {reply:?}")]
    Reply {
        node: u32,
        what: &'static str,
        reply: Value,
    },
    #[error("a 2PC transaction met locks {MAX_2PC_TRIES} times in a row")]
    Starved,
}

/// The script's keys and ARGV for `writes` (then `locks`).
fn apply_args(writes: &[&Write], locks: &[String]) -> (Vec<String>, Vec<String>) {
    let mut keys: Vec<String> = writes.iter().map(|w| w.key.clone()).collect();
    keys.extend(locks.iter().cloned());
    let mut args = vec![writes.len().to_string()];
    args.extend(writes.iter().map(|w| w.op.arg()));
    (keys, args)
}

/// `txn` as one script (and the planted bug, if any).
fn routed_cmd(scripts: &Scripts, txn: &Txn) -> Cmd {
    let finish = matches!(txn.after, Session::Attached { .. }) && txn.writes.len() == 2;
    let writes: Vec<&Write> = txn
        .writes
        .iter()
        .filter(|w| !(finish && scripts.bugs.lose_finish_session && w.key.ends_with(":s")))
        .collect();
    let (keys, args) = apply_args(&writes, &[]);
    evalsha(&scripts.apply, &keys, &args)
}

/// Runs `txn` the Roost way: one script at the node its first key is
/// routed to (what it lacks moves there).
fn run_routed(router: &mut Router, scripts: &Scripts, txn: &Txn) -> Result<u32, TxnError> {
    let first = &txn.writes[0].key;
    let node = router.route(&[first.as_bytes()])?;
    let reply = query(router, node, &routed_cmd(scripts, txn))?;
    if reply != Value::Int(1) {
        return Err(TxnError::Reply {
            node,
            what: "a transaction",
            reply,
        });
    }
    Ok(0)
}

/// Runs `txn` under static sharding: one script at the owner if every
/// object is there, else a 2PC across the owners. Returns the conflicts
/// met.
fn run_static(
    router: &mut Router,
    scripts: &Scripts,
    owner_of_tag: &HashMap<String, u32>,
    txn: &Txn,
    token: &str,
    rng: &mut SmallRng,
) -> Result<u32, TxnError> {
    // Each participant's writes and the locks of its objects.
    let mut parts: Vec<(u32, Vec<&Write>, Vec<String>)> = Vec::new();
    for w in &txn.writes {
        let node = owner_of_tag[&w.tag];
        let lock = format!("ho:{{{}}}:l", w.tag);
        let i = match parts.iter().position(|p| p.0 == node) {
            Some(i) => i,
            None => {
                parts.push((node, Vec::new(), Vec::new()));
                parts.len() - 1
            }
        };
        parts[i].1.push(w);
        if !parts[i].2.contains(&lock) {
            parts[i].2.push(lock);
        }
    }
    let nodes: Vec<u32> = parts.iter().map(|p| p.0).collect();
    for attempt in 0..MAX_2PC_TRIES {
        if let [(node, writes, locks)] = parts.as_slice() {
            let (keys, args) = apply_args(writes, locks);
            match query(router, *node, &evalsha(&scripts.apply, &keys, &args))? {
                Value::Int(1) => return Ok(attempt),
                Value::Int(2) => {
                    back_off(attempt, rng);
                    continue;
                }
                reply => {
                    return Err(TxnError::Reply {
                        node: *node,
                        what: "a one-node transaction",
                        reply,
                    })
                }
            }
        }
        // Prepare everywhere at once.
        let prepares: Vec<Cmd> = parts
            .iter()
            .map(|(_, _, locks)| evalsha(&scripts.prepare, locks, &[token.to_owned()]))
            .collect();
        let replies = send_all(router, &nodes, &prepares)?;
        let took: Vec<bool> = replies.iter().map(|r| *r == Value::Int(1)).collect();
        if took.iter().all(|t| *t) {
            let commits: Vec<Cmd> = parts
                .iter()
                .map(|(_, writes, locks)| {
                    let (keys, mut args) = apply_args(writes, locks);
                    args.push(token.to_owned());
                    evalsha(&scripts.commit, &keys, &args)
                })
                .collect();
            for (node, reply) in nodes.iter().zip(send_all(router, &nodes, &commits)?) {
                if reply != Value::Int(1) {
                    return Err(TxnError::Reply {
                        node: *node,
                        what: "a 2PC commit",
                        reply,
                    });
                }
            }
            return Ok(attempt);
        }
        for ((node, _, locks), took) in parts.iter().zip(&took) {
            if *took {
                query(
                    router,
                    *node,
                    &evalsha(&scripts.release, locks, &[token.to_owned()]),
                )?;
            }
        }
        back_off(attempt, rng);
    }
    Err(TxnError::Starved)
}

/// Runs one client over `phones` until `stop`, counting while `counting`.
#[allow(clippy::too_many_arguments)]
pub fn run_client(
    system: System,
    router: &mut Router,
    scripts: &Scripts,
    layout: &Layout,
    owner_of_tag: &HashMap<String, u32>,
    mut phones: Vec<(u64, Session)>,
    seed: u64,
    stop: &AtomicBool,
    counting: &AtomicBool,
) -> ClientResult {
    let mut rng = SmallRng::seed_from_u64(seed);
    let token = format!("h{seed}");
    let mut result = ClientResult {
        committed: 0,
        handovers: 0,
        cross: 0,
        conflicts: 0,
        latency_ns: latency_histogram(),
        expected: Vec::new(),
        error: None,
    };
    while !stop.load(Ordering::Relaxed) && !phones.is_empty() {
        let i = rng.random_range(0..phones.len());
        let (phone, now) = phones[i];
        let txn = next_txn(layout, phone, now, system, &mut rng);
        let started = Instant::now();
        let outcome = match system {
            System::Roost | System::Perfect => run_routed(router, scripts, &txn),
            System::Static2pc => run_static(router, scripts, owner_of_tag, &txn, &token, &mut rng),
        };
        let conflicts = match outcome {
            Ok(c) => c,
            Err(e) => {
                result.error = Some(e.to_string());
                // Its outcome is unknown: this phone is not checked.
                phones.swap_remove(i);
                break;
            }
        };
        phones[i].1 = txn.after;
        if counting.load(Ordering::Relaxed) {
            record(&mut result.latency_ns, started);
            result.committed += 1;
            result.conflicts += u64::from(conflicts);
            result.handovers += u64::from(matches!(txn.after, Session::HandingOver { .. }));
            let home = owner_of_tag[layout.phone_tag(phone)];
            result.cross += u64::from(txn.writes.iter().any(|w| owner_of_tag[&w.tag] != home));
        }
    }
    result.expected = phones;
    result
}

/// What a client that runs through node failures (`roost demo`) did.
#[derive(Debug, Default)]
pub struct FaultClientResult {
    /// Phones whose last transaction was sent and not answered (its node
    /// died, or answered an error): the session before it and after it,
    /// either of which the database may hold. The phone was then set aside.
    pub unknown: Vec<(u64, Session, Session)>,
    /// The other phones and what their sessions must say.
    pub expected: Vec<(u64, Session)>,
}

/// Counts a client through failures keeps as it goes, for a progress line.
#[derive(Debug, Default)]
pub struct FaultTally {
    /// Transactions acknowledged.
    pub committed: AtomicU64,
    /// Transactions sent and not acknowledged.
    pub unknown: AtomicU64,
}

/// How a transaction sent through failures ended.
enum Sent {
    Acknowledged,
    /// No node took the connection: nothing was sent.
    Unsent,
    /// Sent, and not acknowledged: it may or may not have committed.
    Unknown,
}

/// Sends `txn` as [`run_routed`] does, except that while its route's node
/// refuses connections it goes to the next node that takes one (any node
/// serves any transaction: it takes the reactors it lacks).
fn send_through_faults(router: &mut Router, scripts: &Scripts, txn: &Txn) -> Sent {
    let first = &txn.writes[0].key;
    let Ok(routed) = router.route(&[first.as_bytes()]) else {
        return Sent::Unsent;
    };
    let ids: Vec<u32> = router.nodes().iter().map(|n| n.id).collect();
    let start = ids.iter().position(|&n| n == routed).unwrap_or(0);
    let cmd = routed_cmd(scripts, txn);
    for k in 0..ids.len() {
        let node = ids[(start + k) % ids.len()];
        let Ok(con) = router.connection(node) else {
            continue;
        };
        return match cmd.query::<Value>(con) {
            Ok(Value::Int(1)) => Sent::Acknowledged,
            Ok(_) => Sent::Unknown,
            Err(_) => {
                router.disconnect(node);
                Sent::Unknown
            }
        };
    }
    Sent::Unsent
}

/// Runs one client over `phones` the Roost way until `stop`, through node
/// failures: a transaction no node would take is tried again; one sent
/// but not acknowledged sets its phone aside with both possible sessions.
pub fn run_client_through_faults(
    router: &mut Router,
    scripts: &Scripts,
    layout: &Layout,
    mut phones: Vec<(u64, Session)>,
    seed: u64,
    stop: &AtomicBool,
    tally: &FaultTally,
) -> FaultClientResult {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut result = FaultClientResult::default();
    while !stop.load(Ordering::Relaxed) && !phones.is_empty() {
        let i = rng.random_range(0..phones.len());
        let (phone, now) = phones[i];
        let txn = next_txn(layout, phone, now, System::Roost, &mut rng);
        match send_through_faults(router, scripts, &txn) {
            Sent::Acknowledged => {
                phones[i].1 = txn.after;
                tally.committed.fetch_add(1, Ordering::Relaxed);
            }
            Sent::Unsent => std::thread::sleep(Duration::from_millis(20)),
            Sent::Unknown => {
                phones.swap_remove(i);
                result.unknown.push((phone, now, txn.after));
                tally.unknown.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    result.expected = phones;
    result
}

/// The phones of client `c` of `clients` on node position `p`, as loaded.
pub fn initial_phones(layout: &Layout, p: usize, c: u64, clients: u64) -> Vec<(u64, Session)> {
    let n = layout.params.phones_per_node;
    (0..n)
        .filter(|i| i % clients == c)
        .map(|i| {
            let phone = p as u64 * n + i;
            (
                phone,
                Session::Idle {
                    station: first_station(layout, phone),
                },
            )
        })
        .collect()
}

/// Reads every expected session (at any node: they are replicated); how
/// many disagree, with the first.
pub fn check(
    router: &mut Router,
    layout: &Layout,
    expected: &[(u64, Session)],
) -> Result<(usize, Option<String>), TxnError> {
    let node = router.nodes()[0].id;
    let allowed: Vec<(u64, Vec<Session>)> = expected.iter().map(|&(p, s)| (p, vec![s])).collect();
    check_at(router, node, layout, &allowed)
}

/// Reads every phone's session at `node` (a local read there); how many are
/// none of the sessions `allowed` for it, with the first.
pub fn check_at(
    router: &mut Router,
    node: u32,
    layout: &Layout,
    allowed: &[(u64, Vec<Session>)],
) -> Result<(usize, Option<String>), TxnError> {
    let mut wrong = 0;
    let mut first = None;
    for chunk in allowed.chunks(1_000) {
        let mut cmd = redis::cmd("MGET");
        for (phone, _) in chunk {
            cmd.arg(layout.session_key(*phone));
        }
        let reply = query(router, node, &cmd)?;
        let Value::Array(values) = reply else {
            return Err(TxnError::Reply {
                node,
                what: "MGET",
                reply,
            });
        };
        for ((phone, sessions), value) in chunk.iter().zip(values) {
            assert!(!sessions.is_empty(), "a phone has a session it may hold");
            let got = match &value {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            };
            let wants: Vec<String> = sessions.iter().map(|s| s.encode(layout)).collect();
            if !wants.contains(&got) {
                wrong += 1;
                first.get_or_insert(format!(
                    "phone {phone}: session {:?} at node {node}, expected {}",
                    &got[..got.len().min(24)],
                    wants
                        .iter()
                        .map(|w| format!("{:?}", &w[..w.len().min(24)]))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ));
            }
        }
    }
    Ok((wrong, first))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        let params = Params {
            phones_per_node: 100,
            stations_per_node: 10,
            handover_fraction: 0.5,
            moving_fraction: 0.2,
        };
        let nodes = crate::cluster_load::unreachable_nodes(3);
        let owned = (0..3)
            .map(|p| (0..110).map(|i| format!("{p}-{i}")).collect())
            .collect();
        Layout::new(params, nodes, owned).unwrap()
    }

    #[test]
    fn moving_phones_ring_to_the_next_node_and_back_and_the_others_stay() {
        let l = layout();
        let mut rng = SmallRng::seed_from_u64(3);
        for phone in [0u64, 19, 20, 150, 299] {
            let mut now = Session::Idle {
                station: first_station(&l, phone),
            };
            let home = l.home(phone).0;
            let mut seen_away = false;
            for _ in 0..400 {
                let txn = next_txn(&l, phone, now, System::Roost, &mut rng);
                assert!(txn.writes.iter().any(|w| w.key == l.session_key(phone)));
                if let Session::HandingOver { from, to } = txn.after {
                    assert_ne!(from, to);
                    if l.is_moving(phone) {
                        assert_ne!(from.node, to.node, "a moving phone changes node");
                        assert!(
                            from.node == home || to.node == home,
                            "the ring goes home and back"
                        );
                    } else {
                        assert_eq!(to.node, home);
                    }
                    seen_away |= to.node != home;
                }
                now = txn.after;
            }
            assert_eq!(seen_away, l.is_moving(phone), "phone {phone}");
        }
        // Perfect sharding: nobody leaves.
        let mut now = Session::Attached {
            station: first_station(&l, 0),
        };
        for _ in 0..200 {
            let txn = next_txn(&l, 0, now, System::Perfect, &mut rng);
            if let Session::HandingOver { to, .. } = txn.after {
                assert_eq!(to.node, 0);
            }
            now = txn.after;
        }
    }

    #[test]
    fn a_node_with_too_few_reactors_is_refused() {
        let params = Params {
            phones_per_node: 100,
            stations_per_node: 10,
            handover_fraction: 0.05,
            moving_fraction: 0.2,
        };
        let owned = vec![vec!["a".to_owned(); 109]];
        let nodes = crate::cluster_load::unreachable_nodes(1);
        assert!(Layout::new(params, nodes, owned).is_err());
    }
}

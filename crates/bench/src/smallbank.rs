//! Smallbank, the FaSST/DrTM flavour (`../shared/reference/benchmarks.md`
//! §1.1), over a Roost cluster's RESP ports, run three ways in one harness:
//!
//! - **roost**: each transaction is one Lua script sent, by the client's
//!   [`Router`], to the node its first account's reactor is routed to; the
//!   other account's reactor moves there if it lives elsewhere (Zeus
//!   ownership), and the commit is replicated before the reply (reliable
//!   commit).
//! - **static-2pc**: reactors never move. A transaction on one node's
//!   accounts runs there as one script; one across two nodes is a
//!   two-phase commit driven by the client: *prepare* at each participant
//!   (take the account's lock, read its balances), then *commit* (write the
//!   new balances, release the lock), both phases sent to both
//!   participants at once. A lock held by another transaction aborts the
//!   prepare; the locks taken are released and the transaction is tried
//!   again. Every write (a lock too) is replicated as any Roost write is.
//! - **perfect**: every transaction local by construction (no account of
//!   another partition), routed as `roost`.
//!
//! Accounts: `accounts_per_partition` per node (FaSST: 100,000), the first
//! `hot_per_partition` hot (4,000); 90 % of transactions draw their accounts
//! from the hot set; the mix is FaSST's (Amalgamate 15, Balance 15,
//! DepositChecking 15, SendPayment 25, TransactSaving 15, WriteCheck 15) and
//! so are the semantics, in integer cents. An account's two balances (and
//! its 2PC lock) share one hash tag, so one reactor: a reactor holds a few
//! dozen accounts of one partition.
//!
//! **Remote fraction.** The knob is the fraction of *all* transactions that
//! touch two partitions (and so need an ownership change, or 2PC); only the
//! two-account transactions (40 % of the mix) can, so each of them is
//! cross-partition with probability `remote / 0.4`.
//!
//! **Checked, not assumed.** Every script and every 2PC returns the change
//! it made to the sum of all balances; after a run the harness reads every
//! balance and compares the sum with the start plus those changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_client::{redis, Cmd, NodeAddr, Router, Value};

pub use crate::cluster_load::System;
use crate::cluster_load::{
    back_off, evalsha, latency_histogram, load_script, mset, query, record, send_all, NodeError,
};

/// Every account's two balances start here (cents).
pub const INITIAL_BALANCE_CENTS: i64 = 1_000_000_000;
/// Accounts written per MSET while loading.
const LOAD_BATCH: usize = 2_000;
/// Tries of a static-2PC transaction whose prepare met a lock.
const MAX_2PC_TRIES: u32 = 64;
/// The share of the mix that names two accounts.
pub const TWO_ACCOUNT_SHARE: f64 = 0.40;

/// FaSST's transaction types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnKind {
    Amalgamate,
    Balance,
    DepositChecking,
    SendPayment,
    TransactSaving,
    WriteCheck,
}

/// FaSST's mix (`sb_defs.h`), in percent.
pub const MIX: [(TxnKind, u32); 6] = [
    (TxnKind::Amalgamate, 15),
    (TxnKind::Balance, 15),
    (TxnKind::DepositChecking, 15),
    (TxnKind::SendPayment, 25),
    (TxnKind::TransactSaving, 15),
    (TxnKind::WriteCheck, 15),
];

impl TxnKind {
    pub fn accounts(self) -> usize {
        match self {
            TxnKind::Amalgamate | TxnKind::SendPayment => 2,
            _ => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TxnKind::Amalgamate => "Amalgamate",
            TxnKind::Balance => "Balance",
            TxnKind::DepositChecking => "DepositChecking",
            TxnKind::SendPayment => "SendPayment",
            TxnKind::TransactSaving => "TransactSaving",
            TxnKind::WriteCheck => "WriteCheck",
        }
    }

    /// The whole transaction as one script. KEYS: savings, checking of the
    /// first account, then (two-account kinds) of the second, then (under
    /// static sharding) the accounts' 2PC locks; ARGV[1]: how many keys are
    /// balances. Returns `{committed, change of the total in cents}`, or
    /// `{2, 0}` if a 2PC holds a lock on one of the accounts.
    fn script(self) -> String {
        format!("{LOCK_CHECK} {}", self.body())
    }

    fn body(self) -> &'static str {
        match self {
            TxnKind::Amalgamate => {
                "local s0 = tonumber(redis.call('GET', KEYS[1])) \
                 local c0 = tonumber(redis.call('GET', KEYS[2])) \
                 redis.call('INCRBY', KEYS[4], s0 + c0) \
                 redis.call('SET', KEYS[1], 0) redis.call('SET', KEYS[2], 0) \
                 return {1, 0}"
            }
            TxnKind::Balance => {
                "local s = tonumber(redis.call('GET', KEYS[1])) \
                 local c = tonumber(redis.call('GET', KEYS[2])) \
                 if s == nil or c == nil then return redis.error_reply('no such account') end \
                 return {1, 0}"
            }
            TxnKind::DepositChecking => "redis.call('INCRBY', KEYS[2], 130) return {1, 130}",
            TxnKind::SendPayment => {
                "if tonumber(redis.call('GET', KEYS[2])) < 500 then return {0, 0} end \
                 redis.call('DECRBY', KEYS[2], 500) redis.call('INCRBY', KEYS[4], 500) \
                 return {1, 0}"
            }
            TxnKind::TransactSaving => "redis.call('INCRBY', KEYS[1], 2020) return {1, 2020}",
            TxnKind::WriteCheck => {
                "local s = tonumber(redis.call('GET', KEYS[1])) \
                 local c = tonumber(redis.call('GET', KEYS[2])) \
                 if s + c < 500 then redis.call('DECRBY', KEYS[2], 600) return {1, -600} end \
                 redis.call('DECRBY', KEYS[2], 500) return {1, -500}"
            }
        }
    }

    /// Picks a kind by the mix from a draw in `0..100`.
    pub fn from_draw(draw: u32) -> TxnKind {
        crate::cluster_load::pick_by_percent(&MIX, draw)
    }
}

/// A whole transaction waits for a 2PC holding one of its accounts.
const LOCK_CHECK: &str = "for i = tonumber(ARGV[1]) + 1, #KEYS do \
     if redis.call('EXISTS', KEYS[i]) == 1 then return {2, 0} end end";
/// What a whole-transaction script answers when a 2PC holds a lock.
const LOCKED: i64 = 2;

/// 2PC's prepare: takes the lock (KEYS[1]) for ARGV[1] and reads the
/// balances (KEYS[2], KEYS[3]); `{0}` if another transaction holds it.
const PREPARE: &str = "if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end \
     redis.call('SET', KEYS[1], ARGV[1]) \
     return {1, tonumber(redis.call('GET', KEYS[2])), tonumber(redis.call('GET', KEYS[3]))}";
/// 2PC's commit: writes the balances and releases the lock.
const COMMIT: &str =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('2PC lock lost') end \
     redis.call('SET', KEYS[2], ARGV[2]) redis.call('SET', KEYS[3], ARGV[3]) \
     redis.call('DEL', KEYS[1]) return 1";
/// 2PC's abort: releases the lock if this transaction holds it.
const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end return 1";

/// Workload sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub accounts_per_partition: u64,
    pub hot_per_partition: u64,
    /// Percent of transactions on hot accounts.
    pub hot_percent: u32,
}

impl Params {
    /// FaSST's `sb_defs.h`.
    pub const FASST: Params = Params {
        accounts_per_partition: 100_000,
        hot_per_partition: 4_000,
        hot_percent: 90,
    };
}

/// Where the accounts live: each account's hash tag (its reactor).
pub struct Layout {
    pub params: Params,
    pub partitions: usize,
    /// Per home partition, the tags of the reactors its accounts use.
    tags: Vec<Vec<String>>,
}

impl Layout {
    /// Spreads each partition's accounts over the reactors node `p` owns
    /// now: `owned[p]` lists their tags.
    pub fn new(params: Params, owned: Vec<Vec<String>>) -> Layout {
        assert!(
            owned.iter().all(|t| !t.is_empty()),
            "every node owns a reactor"
        );
        assert!(params.hot_per_partition <= params.accounts_per_partition);
        Layout {
            params,
            partitions: owned.len(),
            tags: owned,
        }
    }

    pub fn accounts(&self) -> u64 {
        self.params.accounts_per_partition * self.partitions as u64
    }

    fn home(&self, account: u64) -> (usize, u64) {
        let n = self.params.accounts_per_partition;
        ((account / n) as usize, account % n)
    }

    pub fn tag(&self, account: u64) -> &str {
        let (p, i) = self.home(account);
        let tags = &self.tags[p];
        &tags[(i % tags.len() as u64) as usize]
    }

    /// The account's savings, checking and 2PC lock keys.
    pub fn keys(&self, account: u64) -> [String; 3] {
        let tag = self.tag(account);
        [
            format!("sb:{{{tag}}}:s:{account}"),
            format!("sb:{{{tag}}}:c:{account}"),
            format!("sb:{{{tag}}}:l:{account}"),
        ]
    }

    pub fn is_hot(&self, account: u64) -> bool {
        self.home(account).1 < self.params.hot_per_partition
    }

    /// Every tag in use.
    pub fn all_tags(&self) -> impl Iterator<Item = &String> {
        self.tags.iter().flatten()
    }
}

/// The partitions as the reactors' owners make them now: partition `p` is
/// the accounts whose reactor node `p` owns.
pub struct Partitions {
    hot: Vec<Vec<u64>>,
    all: Vec<Vec<u64>>,
    /// Each tag's owner now (static-2PC sends to it; it never changes
    /// during a run of that system).
    pub owner_of_tag: HashMap<String, u32>,
}

impl Partitions {
    pub fn new(
        layout: &Layout,
        owner_of_tag: HashMap<String, u32>,
        nodes: &[NodeAddr],
    ) -> Partitions {
        let index: HashMap<u32, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
        let mut hot = vec![Vec::new(); nodes.len()];
        let mut all = vec![Vec::new(); nodes.len()];
        for account in 0..layout.accounts() {
            let owner = owner_of_tag[layout.tag(account)];
            let p = index[&owner];
            all[p].push(account);
            if layout.is_hot(account) {
                hot[p].push(account);
            }
        }
        Partitions {
            hot,
            all,
            owner_of_tag,
        }
    }

    pub fn sizes(&self) -> Vec<usize> {
        self.all.iter().map(Vec::len).collect()
    }
}

/// One transaction to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Txn {
    pub kind: TxnKind,
    pub accounts: [u64; 2],
    /// Its accounts are in two partitions.
    pub cross: bool,
}

/// Draws transactions for a client of partition `p`.
pub fn next_txn(
    parts: &Partitions,
    params: &Params,
    p: usize,
    cross_probability: f64,
    rng: &mut SmallRng,
) -> Txn {
    let kind = TxnKind::from_draw(rng.random_range(0..100));
    let hot = rng.random_range(0..100) < params.hot_percent;
    let pick = |part: usize, rng: &mut SmallRng| {
        let list = if hot && !parts.hot[part].is_empty() {
            &parts.hot[part]
        } else {
            &parts.all[part]
        };
        list[rng.random_range(0..list.len())]
    };
    let first = pick(p, rng);
    if kind.accounts() == 1 {
        return Txn {
            kind,
            accounts: [first, first],
            cross: false,
        };
    }
    let partitions = parts.all.len();
    let cross = partitions > 1 && rng.random_bool(cross_probability.clamp(0.0, 1.0));
    let q = if cross {
        (p + rng.random_range(1..partitions)) % partitions
    } else {
        p
    };
    // Bounded: a partition of one account cannot give a second.
    let mut second = pick(q, rng);
    for _ in 0..64 {
        if second != first {
            break;
        }
        second = pick(q, rng);
    }
    Txn {
        kind,
        accounts: [first, second],
        cross,
    }
}

/// What one transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub committed: bool,
    /// Change to the sum of all balances (cents).
    pub delta_cents: i64,
    /// Prepares that met a lock (static-2PC), or server aborts retried.
    pub conflicts: u32,
}

/// Why a transaction failed.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    #[error(transparent)]
    Route(#[from] roost_client::RouteError),
    #[error("node {node} answered {what} with {reply:?}")]
    Reply {
        node: u32,
        what: &'static str,
        reply: Value,
    },
    #[error("a 2PC transaction met locks {tries} times in a row")]
    Starved { tries: u32 },
    #[error(transparent)]
    Node(#[from] NodeError),
}

/// Bugs planted in the static-2PC baseline, to show that the harness's
/// balance check catches a lost update (`cli/tests/smallbank.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlantedBugs {
    /// A one-node transaction runs without looking at the 2PC locks of its
    /// accounts, so a 2PC's commit can overwrite its update.
    pub local_ignores_locks: bool,
}

/// The scripts' SHA-1s, loaded at every node, and the bugs planted in how
/// they are used.
#[derive(Debug, Clone)]
pub struct Scripts {
    pub bugs: PlantedBugs,
    txn: HashMap<TxnKind, String>,
    prepare: String,
    commit: String,
    release: String,
}

impl Scripts {
    /// SCRIPT LOAD of every script at every node of `router`.
    pub fn load(router: &mut Router) -> Result<Scripts, TxnError> {
        let mut txn = HashMap::new();
        for (kind, _) in MIX {
            txn.insert(kind, load_script(router, &kind.script())?);
        }
        Ok(Scripts {
            bugs: PlantedBugs::default(),
            txn,
            prepare: load_script(router, PREPARE)?,
            commit: load_script(router, COMMIT)?,
            release: load_script(router, RELEASE)?,
        })
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// `{committed, delta}` from a whole-transaction script; `None` if a 2PC
/// held one of its accounts.
fn outcome(node: u32, reply: Value) -> Result<Option<Outcome>, TxnError> {
    if let Value::Array(items) = &reply {
        if let [c, d] = items.as_slice() {
            match (int(c), int(d)) {
                (Some(LOCKED), _) => return Ok(None),
                (Some(c @ (0 | 1)), Some(d)) => {
                    return Ok(Some(Outcome {
                        committed: c == 1,
                        delta_cents: d,
                        conflicts: 0,
                    }))
                }
                _ => {}
            }
        }
    }
    Err(TxnError::Reply {
        node,
        what: "a transaction script",
        reply,
    })
}

/// The whole-transaction script's keys (with the accounts' 2PC locks, if
/// `locks`) and ARGV[1], the number of balance keys.
fn txn_keys(layout: &Layout, txn: &Txn, locks: bool) -> (Vec<String>, String) {
    let [s0, c0, l0] = layout.keys(txn.accounts[0]);
    let mut keys = vec![s0, c0];
    let mut lock_keys = vec![l0];
    if txn.kind.accounts() == 2 {
        let [s1, c1, l1] = layout.keys(txn.accounts[1]);
        keys.extend([s1, c1]);
        lock_keys.push(l1);
    }
    let balances = keys.len().to_string();
    if locks {
        keys.extend(lock_keys);
    }
    (keys, balances)
}

/// Runs `txn` as one script at the node the router routes its first key to.
pub fn run_routed(
    router: &mut Router,
    scripts: &Scripts,
    layout: &Layout,
    txn: &Txn,
) -> Result<Outcome, TxnError> {
    let (keys, balances) = txn_keys(layout, txn, false);
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let cmd = evalsha(&scripts.txn[&txn.kind], &refs, &[&balances]);
    let node = router.route(&[keys[0].as_bytes()])?;
    let reply = query(router, node, &cmd).inspect_err(|_| router.disconnect(node))?;
    outcome(node, reply.clone())?.ok_or(TxnError::Reply {
        node,
        what: "a transaction script without locks",
        reply,
    })
}

/// Runs `txn` under static sharding: at its accounts' owner if one, else
/// by two-phase commit across the two.
pub fn run_static(
    router: &mut Router,
    scripts: &Scripts,
    layout: &Layout,
    parts: &Partitions,
    txn: &Txn,
    token: &str,
    rng: &mut SmallRng,
) -> Result<Outcome, TxnError> {
    let owner = |a: u64| parts.owner_of_tag[layout.tag(a)];
    let (n0, n1) = (owner(txn.accounts[0]), owner(txn.accounts[1]));
    if txn.kind.accounts() == 1 || n0 == n1 {
        let (keys, balances) = txn_keys(layout, txn, !scripts.bugs.local_ignores_locks);
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let cmd = evalsha(&scripts.txn[&txn.kind], &refs, &[&balances]);
        for attempt in 0..MAX_2PC_TRIES {
            let reply = query(router, n0, &cmd)?;
            if let Some(mut done) = outcome(n0, reply)? {
                done.conflicts = attempt;
                return Ok(done);
            }
            back_off(attempt, rng);
        }
        return Err(TxnError::Starved {
            tries: MAX_2PC_TRIES,
        });
    }
    let k0 = layout.keys(txn.accounts[0]);
    let k1 = layout.keys(txn.accounts[1]);
    let participants = [(n0, &k0), (n1, &k1)];
    for attempt in 0..MAX_2PC_TRIES {
        // Prepare at both, at once.
        let prepares: Vec<Cmd> = participants
            .iter()
            .map(|(_, k)| evalsha(&scripts.prepare, &[&k[2], &k[0], &k[1]], &[token]))
            .collect();
        let replies = send_all(router, &participants.map(|(n, _)| n), &prepares)?;
        let read = |i: usize| -> Result<Option<(i64, i64)>, TxnError> {
            let bad = || TxnError::Reply {
                node: participants[i].0,
                what: "a 2PC prepare",
                reply: replies[i].clone(),
            };
            let Value::Array(items) = &replies[i] else {
                return Err(bad());
            };
            match items.as_slice() {
                [flag] if int(flag) == Some(0) => Ok(None),
                [flag, s, c] if int(flag) == Some(1) => {
                    Ok(Some((int(s).ok_or_else(bad)?, int(c).ok_or_else(bad)?)))
                }
                _ => Err(bad()),
            }
        };
        let (r0, r1) = (read(0)?, read(1)?);
        let (Some((s0, c0)), Some((s1, c1))) = (r0, r1) else {
            // A lock held elsewhere: release what this try took, back off.
            let mut releases = Vec::new();
            let mut to = Vec::new();
            for (i, r) in [r0, r1].iter().enumerate() {
                if r.is_some() {
                    let k = participants[i].1;
                    releases.push(evalsha(&scripts.release, &[&k[2]], &[token]));
                    to.push(participants[i].0);
                }
            }
            for (node, cmd) in to.iter().zip(&releases) {
                query(router, *node, cmd)?;
            }
            back_off(attempt, rng);
            continue;
        };
        let (new0, new1, committed, delta) = match txn.kind {
            TxnKind::Amalgamate => ((0, 0), (s1, c1 + s0 + c0), true, 0),
            TxnKind::SendPayment if c0 < 500 => ((s0, c0), (s1, c1), false, 0),
            TxnKind::SendPayment => ((s0, c0 - 500), (s1, c1 + 500), true, 0),
            other => unreachable!("{} names one account", other.name()),
        };
        let commits: Vec<Cmd> = [(participants[0], new0), (participants[1], new1)]
            .iter()
            .map(|((_, k), (s, c))| {
                let (s, c) = (s.to_string(), c.to_string());
                evalsha(&scripts.commit, &[&k[2], &k[0], &k[1]], &[token, &s, &c])
            })
            .collect();
        let replies = send_all(router, &participants.map(|(n, _)| n), &commits)?;
        for (i, reply) in replies.into_iter().enumerate() {
            if int(&reply) != Some(1) {
                return Err(TxnError::Reply {
                    node: participants[i].0,
                    what: "a 2PC commit",
                    reply,
                });
            }
        }
        return Ok(Outcome {
            committed,
            delta_cents: delta,
            // Every earlier try met a lock.
            conflicts: attempt,
        });
    }
    Err(TxnError::Starved {
        tries: MAX_2PC_TRIES,
    })
}

/// Writes every account's balances at the node owning its reactor.
pub fn load(
    router: &mut Router,
    layout: &Layout,
    owner_of_tag: &HashMap<String, u32>,
) -> Result<(), TxnError> {
    let mut batches: HashMap<u32, Vec<String>> = HashMap::new();
    let initial = INITIAL_BALANCE_CENTS.to_string();
    for account in 0..layout.accounts() {
        let node = owner_of_tag[layout.tag(account)];
        let [s, c, _] = layout.keys(account);
        let batch = batches.entry(node).or_default();
        batch.extend([s, initial.clone(), c, initial.clone()]);
        if batch.len() >= 4 * LOAD_BATCH {
            let batch = std::mem::take(batch);
            mset(router, node, &batch)?;
        }
    }
    for (node, batch) in batches {
        if !batch.is_empty() {
            mset(router, node, &batch)?;
        }
    }
    Ok(())
}

/// The sum of every balance, read at the owners (after a run).
pub fn total_cents(
    router: &mut Router,
    layout: &Layout,
    owner_of_tag: &HashMap<String, u32>,
) -> Result<i128, TxnError> {
    let mut by_node: HashMap<u32, Vec<String>> = HashMap::new();
    for account in 0..layout.accounts() {
        let [s, c, _] = layout.keys(account);
        by_node
            .entry(owner_of_tag[layout.tag(account)])
            .or_default()
            .extend([s, c]);
    }
    let mut total: i128 = 0;
    for (node, keys) in by_node {
        for chunk in keys.chunks(2 * LOAD_BATCH) {
            let mut cmd = redis::cmd("MGET");
            for k in chunk {
                cmd.arg(k);
            }
            let reply = query(router, node, &cmd)?;
            let Value::Array(values) = &reply else {
                return Err(TxnError::Reply {
                    node,
                    what: "MGET",
                    reply,
                });
            };
            for v in values {
                let Some(cents) = int(v) else {
                    return Err(TxnError::Reply {
                        node,
                        what: "MGET (a balance)",
                        reply: v.clone(),
                    });
                };
                total += i128::from(cents);
            }
        }
    }
    Ok(total)
}

/// One client's tally.
#[derive(Debug)]
pub struct ClientResult {
    pub committed: u64,
    pub user_aborts: u64,
    pub conflicts: u64,
    pub cross: u64,
    pub delta_cents: i64,
    pub latency_ns: Histogram<u64>,
    pub error: Option<String>,
}

/// Runs one client of partition `p` until `stop`, counting while
/// `counting`. A transaction that fails with an error ends the client
/// (counted in `error`): its effect is unknown, so the total check would
/// not hold; the run reports it.
#[allow(clippy::too_many_arguments)]
pub fn run_client(
    system: System,
    router: &mut Router,
    scripts: &Scripts,
    layout: &Layout,
    parts: &Partitions,
    p: usize,
    remote: f64,
    seed: u64,
    stop: &AtomicBool,
    counting: &AtomicBool,
) -> ClientResult {
    let mut rng = SmallRng::seed_from_u64(seed);
    let cross_probability = match system {
        System::Perfect => 0.0,
        _ => (remote / TWO_ACCOUNT_SHARE).min(1.0),
    };
    let token = format!("t{seed}");
    let mut result = ClientResult {
        committed: 0,
        user_aborts: 0,
        conflicts: 0,
        cross: 0,
        delta_cents: 0,
        latency_ns: latency_histogram(),
        error: None,
    };
    while !stop.load(Ordering::Relaxed) {
        let txn = next_txn(parts, &layout.params, p, cross_probability, &mut rng);
        let started = Instant::now();
        let outcome = match system {
            System::Roost | System::Perfect => run_routed(router, scripts, layout, &txn),
            System::Static2pc => run_static(router, scripts, layout, parts, &txn, &token, &mut rng),
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                result.error = Some(e.to_string());
                return result;
            }
        };
        // Its effect counts whether or not the window is open.
        result.delta_cents += outcome.delta_cents;
        if counting.load(Ordering::Relaxed) {
            record(&mut result.latency_ns, started);
            if outcome.committed {
                result.committed += 1;
            } else {
                result.user_aborts += 1;
            }
            result.conflicts += u64::from(outcome.conflicts);
            result.cross += u64::from(txn.cross);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        let params = Params {
            accounts_per_partition: 1_000,
            hot_per_partition: 40,
            hot_percent: 90,
        };
        let tags = (0..3)
            .map(|p| (0..5).map(|i| format!("{p}-{i}")).collect())
            .collect();
        Layout::new(params, tags)
    }

    fn parts(layout: &Layout) -> (Partitions, Vec<NodeAddr>) {
        let nodes = crate::cluster_load::unreachable_nodes(3);
        let owners = layout
            .all_tags()
            .map(|t| (t.clone(), t[..1].parse::<u32>().unwrap()))
            .collect();
        (Partitions::new(layout, owners, &nodes), nodes)
    }

    #[test]
    fn the_mix_is_fassts_and_accounts_share_their_reactor_tag() {
        let mut counts: HashMap<TxnKind, u32> = HashMap::new();
        for draw in 0..100 {
            *counts.entry(TxnKind::from_draw(draw)).or_default() += 1;
        }
        for (kind, weight) in MIX {
            assert_eq!(counts[&kind], weight, "{}", kind.name());
        }
        let l = layout();
        let [s, c, lock] = l.keys(1_234);
        let tag = l.tag(1_234);
        assert!(tag.starts_with("1-"), "account 1234 is partition 1's");
        for k in [&s, &c, &lock] {
            assert!(k.contains(&format!("{{{tag}}}")), "{k}");
        }
        assert!(l.is_hot(1_010) && !l.is_hot(1_040));
    }

    #[test]
    fn the_remote_knob_is_the_share_of_all_transactions_that_cross() {
        let l = layout();
        let (parts, _) = parts(&l);
        assert_eq!(parts.sizes(), vec![1_000, 1_000, 1_000]);
        let mut rng = SmallRng::seed_from_u64(7);
        let n = 100_000;
        for remote in [0.0, 0.01, 0.1, 0.4] {
            let mut cross = 0;
            let mut hot = 0;
            for _ in 0..n {
                let t = next_txn(&parts, &l.params, 2, remote / TWO_ACCOUNT_SHARE, &mut rng);
                let home = |a: u64| (a / 1_000) as usize;
                assert_eq!(home(t.accounts[0]), 2, "the first account is the client's");
                assert_eq!(t.cross, home(t.accounts[1]) != 2);
                if t.kind.accounts() == 2 {
                    assert_ne!(t.accounts[0], t.accounts[1]);
                }
                cross += u64::from(t.cross);
                hot += u64::from(l.is_hot(t.accounts[0]));
            }
            let share = cross as f64 / n as f64;
            assert!((share - remote).abs() < 0.01, "remote {remote}: {share}");
            let hot = hot as f64 / n as f64;
            assert!((hot - 0.9).abs() < 0.01, "hot share {hot}");
        }
    }
}

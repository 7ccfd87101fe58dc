//! TATP, the telecom HLR benchmark (`../shared/reference/benchmarks.md`
//! §1.2), over a Roost cluster's RESP ports, three ways:
//!
//! - **roost**: each client is the application on its node (the Zeus
//!   seed's setting: a request arrives at a node and runs there). Reads
//!   (80 % of the mix) run on the node's local replica as `EVALSHA_RO`
//!   (Zeus's local read-only transactions: any replica, no ownership);
//!   writes run at the node too, which takes the subscriber's reactor if
//!   another node owns it (an ownership change) or, when that reactor is
//!   contended, forwards the write to its owner (the node's
//!   migrate-or-forward policy).
//! - **static-2pc**: reactors never move; every transaction, reads too,
//!   runs at the subscriber's owner (its primary), reached directly by the
//!   client. A TATP transaction names one subscriber, so none needs a
//!   two-phase commit here: this baseline pays nothing for a remote access
//!   (FaSST pays a network round trip per remote read and its commit
//!   protocol's messages).
//! - **perfect**: every subscriber a client names is one its node owns.
//!
//! Tables, per subscriber (`s_id`), all in its reactor (one hash tag): the
//! `SUBSCRIBER` row and its `ACCESS_INFO` and `SPECIAL_FACILITY` rows as
//! fields of one hash, its `CALL_FORWARDING` rows in a second hash, and
//! the `sub_nbr -> s_id` index entry (FaSST's secondary table) as a string.
//! FaSST places that index by `sub_nbr`, so its UPDATE_LOCATION and
//! call-forwarding transactions touch two partitions; here it lives with
//! its subscriber, so every transaction names one reactor. Populations and
//! success rates are the spec's (1-4 access-info and special-facility rows,
//! 0-3 call-forwarding rows per facility, start times 0, 8, 16); the mix is
//! 35/10/35/2/14/2/2; subscribers are drawn with FaSST's NURand.
//!
//! **Remote fraction.** The share of *all* transactions whose subscriber a
//! node other than the client's owns (at the cell's start).
//!
//! **Checked, not assumed.** Each client counts the call-forwarding rows
//! its transactions inserted and deleted; after a run every subscriber's
//! call-forwarding rows are counted and must equal the load plus the
//! inserts less the deletes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_client::{redis, NodeAddr, Router, Value};

pub use crate::cluster_load::System;
use crate::cluster_load::{
    evalsha, evalsha_ro, latency_histogram, load_script, query, record, NodeError,
};

/// Commands per pipeline while loading and counting.
const BATCH: usize = 1_000;
/// Start times of call-forwarding rows (the spec's; BenchBase's loader
/// has {0, 8, 6}, a bug).
const START_TIMES: [u32; 3] = [0, 8, 16];

/// TATP's transaction types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnKind {
    GetSubscriberData,
    GetNewDestination,
    GetAccessData,
    UpdateSubscriberData,
    UpdateLocation,
    InsertCallForwarding,
    DeleteCallForwarding,
}

/// The spec's mix (BenchBase's `TATPConstants`, FaSST's `tatp_defs.h`), in
/// percent.
pub const MIX: [(TxnKind, u32); 7] = [
    (TxnKind::GetSubscriberData, 35),
    (TxnKind::GetNewDestination, 10),
    (TxnKind::GetAccessData, 35),
    (TxnKind::UpdateSubscriberData, 2),
    (TxnKind::UpdateLocation, 14),
    (TxnKind::InsertCallForwarding, 2),
    (TxnKind::DeleteCallForwarding, 2),
];

impl TxnKind {
    pub fn name(self) -> &'static str {
        match self {
            TxnKind::GetSubscriberData => "GET_SUBSCRIBER_DATA",
            TxnKind::GetNewDestination => "GET_NEW_DESTINATION",
            TxnKind::GetAccessData => "GET_ACCESS_DATA",
            TxnKind::UpdateSubscriberData => "UPDATE_SUBSCRIBER_DATA",
            TxnKind::UpdateLocation => "UPDATE_LOCATION",
            TxnKind::InsertCallForwarding => "INSERT_CALL_FORWARDING",
            TxnKind::DeleteCallForwarding => "DELETE_CALL_FORWARDING",
        }
    }

    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            TxnKind::GetSubscriberData | TxnKind::GetNewDestination | TxnKind::GetAccessData
        )
    }

    /// Picks a kind by the mix from a draw in `0..100`.
    pub fn pick(draw: u32) -> TxnKind {
        crate::cluster_load::pick_by_percent(&MIX, draw)
    }

    /// The transaction as one script. KEYS[1]: the subscriber's hash;
    /// KEYS[2]: its call-forwarding hash; KEYS[3]: its `sub_nbr` index
    /// entry. Returns 1 (found/done) or 0 (the spec's expected miss: no
    /// such row, or a duplicate insert).
    fn script(self, bugs: PlantedBugs) -> &'static str {
        match self {
            TxnKind::GetSubscriberData => {
                "local r = redis.call('HMGET', KEYS[1], 'bit1', 'vlr', 'msc', 'data') \
                 if r[1] == false then return redis.error_reply('no such subscriber') end \
                 return 1"
            }
            TxnKind::GetNewDestination => {
                "local f = redis.call('HGET', KEYS[1], 'f' .. ARGV[1]) \
                 if f == false or string.sub(f, 1, 1) ~= '1' then return 0 end \
                 local start, stop = tonumber(ARGV[2]), tonumber(ARGV[3]) \
                 for _, st in ipairs({0, 8, 16}) do \
                   if st <= start then \
                     local cf = redis.call('HGET', KEYS[2], ARGV[1] .. ':' .. st) \
                     if cf ~= false and tonumber(string.match(cf, '^(%d+)')) > stop then \
                       return 1 end end end \
                 return 0"
            }
            TxnKind::GetAccessData => {
                "if redis.call('HGET', KEYS[1], 'a' .. ARGV[1]) == false then return 0 end \
                 return 1"
            }
            TxnKind::UpdateSubscriberData => {
                "local f = redis.call('HGET', KEYS[1], 'f' .. ARGV[2]) \
                 if f == false then return 0 end \
                 redis.call('HSET', KEYS[1], 'bit1', ARGV[1], 'f' .. ARGV[2], \
                   string.sub(f, 1, 4) .. ARGV[3] .. string.sub(f, 8)) \
                 return 1"
            }
            TxnKind::UpdateLocation => {
                "if redis.call('GET', KEYS[3]) ~= ARGV[2] then \
                   return redis.error_reply('sub_nbr index disagrees') end \
                 redis.call('HSET', KEYS[1], 'vlr', ARGV[1]) return 1"
            }
            TxnKind::InsertCallForwarding if bugs.insert_skips_row => {
                "if redis.call('GET', KEYS[3]) ~= ARGV[5] then \
                   return redis.error_reply('sub_nbr index disagrees') end \
                 if redis.call('HEXISTS', KEYS[1], 'f' .. ARGV[1]) == 0 then return 0 end \
                 if redis.call('HEXISTS', KEYS[2], ARGV[1] .. ':' .. ARGV[2]) == 1 then \
                   return 0 end \
                 return 1"
            }
            TxnKind::InsertCallForwarding => {
                "if redis.call('GET', KEYS[3]) ~= ARGV[5] then \
                   return redis.error_reply('sub_nbr index disagrees') end \
                 if redis.call('HEXISTS', KEYS[1], 'f' .. ARGV[1]) == 0 then return 0 end \
                 local field = ARGV[1] .. ':' .. ARGV[2] \
                 if redis.call('HEXISTS', KEYS[2], field) == 1 then return 0 end \
                 redis.call('HSET', KEYS[2], field, ARGV[3] .. '|' .. ARGV[4]) return 1"
            }
            TxnKind::DeleteCallForwarding => {
                "if redis.call('GET', KEYS[3]) ~= ARGV[3] then \
                   return redis.error_reply('sub_nbr index disagrees') end \
                 return redis.call('HDEL', KEYS[2], ARGV[1] .. ':' .. ARGV[2])"
            }
        }
    }
}

/// Workload sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Subscribers per node (FaSST: 1,000,000).
    pub subscribers_per_node: u64,
}

/// FaSST's NURand constant for a population of `n`
/// (`NURand(A, 0, n-1) = ((r % n) | (r & A)) % n`).
pub fn nurand_a(n: u64) -> u64 {
    if n <= 1_000_000 {
        65_535
    } else if n <= 10_000_000 {
        1_048_575
    } else {
        2_097_151
    }
}

/// A NURand draw in `0..n`.
pub fn nurand(rng: &mut SmallRng, n: u64) -> u64 {
    assert!(n > 0, "a non-empty population");
    let (x, y): (u64, u64) = (rng.random(), rng.random());
    ((x % n) | (y & nurand_a(n))) % n
}

/// Where the subscribers live: each one's hash tag (its reactor).
pub struct Layout {
    pub params: Params,
    pub nodes: Vec<NodeAddr>,
    /// Per home node, the tags of the reactors its subscribers use.
    tags: Vec<Vec<String>>,
}

impl Layout {
    /// Spreads each node's subscribers over the reactors it owns now
    /// (`owned[p]`, by node position).
    pub fn new(params: Params, nodes: Vec<NodeAddr>, owned: Vec<Vec<String>>) -> Layout {
        assert_eq!(nodes.len(), owned.len(), "tags per node");
        assert!(
            owned.iter().all(|t| !t.is_empty()),
            "every node owns a reactor"
        );
        Layout {
            params,
            nodes,
            tags: owned,
        }
    }

    pub fn subscribers(&self) -> u64 {
        self.params.subscribers_per_node * self.nodes.len() as u64
    }

    pub fn tag(&self, s_id: u64) -> &str {
        let n = self.params.subscribers_per_node;
        let tags = &self.tags[(s_id / n) as usize];
        &tags[((s_id % n) % tags.len() as u64) as usize]
    }

    /// The subscriber's number: its id, zero-padded to 15 digits.
    pub fn sub_nbr(s_id: u64) -> String {
        format!("{s_id:0>15}")
    }

    /// KEYS of every script: the subscriber's hash, its call forwarding,
    /// its index entry.
    pub fn keys(&self, s_id: u64) -> [String; 3] {
        let tag = self.tag(s_id);
        [
            format!("tatp:{{{tag}}}:s:{s_id}"),
            format!("tatp:{{{tag}}}:cf:{s_id}"),
            format!("tatp:{{{tag}}}:n:{}", Layout::sub_nbr(s_id)),
        ]
    }

    pub fn all_tags(&self) -> impl Iterator<Item = &String> {
        self.tags.iter().flatten()
    }
}

/// The subscribers as the reactors' owners make them now: node position
/// `p`'s are those whose reactor it owns.
pub struct Partitions {
    subscribers: Vec<Vec<u64>>,
    pub owner_of_tag: HashMap<String, u32>,
}

impl Partitions {
    pub fn new(layout: &Layout, owner_of_tag: HashMap<String, u32>) -> Partitions {
        let index: HashMap<u32, usize> = layout
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id, i))
            .collect();
        let mut subscribers = vec![Vec::new(); layout.nodes.len()];
        for s_id in 0..layout.subscribers() {
            subscribers[index[&owner_of_tag[layout.tag(s_id)]]].push(s_id);
        }
        Partitions {
            subscribers,
            owner_of_tag,
        }
    }

    pub fn sizes(&self) -> Vec<usize> {
        self.subscribers.iter().map(Vec::len).collect()
    }
}

/// One subscriber's rows as loaded: the subscriber hash's field-value
/// pairs, and its call-forwarding rows.
fn rows(s_id: u64, rng: &mut SmallRng) -> (Vec<String>, Vec<String>) {
    let mut sub = vec![
        "bit1".to_owned(),
        rng.random_range(0..2u8).to_string(),
        "vlr".to_owned(),
        rng.random::<u32>().to_string(),
        "msc".to_owned(),
        rng.random::<u32>().to_string(),
        "data".to_owned(),
        // The remaining bits, hex and byte2 fields (FaSST packs 40 B).
        format!("{:0>24x}", u128::from(s_id) * 0x9e37_79b9),
    ];
    let mut cf = Vec::new();
    // 1-4 distinct types of each, as the spec's loader.
    for (prefix, _) in [("a", 0), ("f", 1)] {
        let count = rng.random_range(1..=4u32);
        let mut types: Vec<u32> = (1..=4).collect();
        for i in 0..4 {
            let j = rng.random_range(i..4);
            types.swap(i, j);
        }
        for &t in &types[..count as usize] {
            sub.push(format!("{prefix}{t}"));
            if prefix == "a" {
                sub.push(format!(
                    "{}|{}|{:0>3}|{:0>5}",
                    rng.random::<u8>(),
                    rng.random::<u8>(),
                    t,
                    s_id % 100_000
                ));
            } else {
                // is_active (85 % 1), error_cntrl, data_a, data_b.
                let active = u8::from(rng.random_bool(0.85));
                sub.push(format!(
                    "{active}|{:0>2}|{:0>3}|{:0>5}",
                    t,
                    rng.random::<u8>(),
                    t
                ));
                let calls = rng.random_range(0..=3usize);
                for &start in &START_TIMES[..calls] {
                    let end = start + rng.random_range(1..=8u32);
                    cf.push(format!("{t}:{start}"));
                    cf.push(format!("{end}|{:0>15}", s_id));
                }
            }
        }
    }
    (sub, cf)
}

/// Writes every subscriber's rows at the node owning its reactor; the
/// call-forwarding rows written.
pub fn load(
    router: &mut Router,
    layout: &Layout,
    owner_of_tag: &HashMap<String, u32>,
    seed: u64,
) -> Result<u64, NodeError> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut pipes: HashMap<u32, (redis::Pipeline, usize)> = HashMap::new();
    let mut call_forwarding = 0;
    for s_id in 0..layout.subscribers() {
        let node = owner_of_tag[layout.tag(s_id)];
        let [sub_key, cf_key, index_key] = layout.keys(s_id);
        let (sub, cf) = rows(s_id, &mut rng);
        let (pipe, n) = pipes.entry(node).or_insert_with(|| (redis::pipe(), 0));
        pipe.cmd("HSET").arg(&sub_key).arg(&sub).ignore();
        pipe.cmd("SET").arg(&index_key).arg(s_id).ignore();
        *n += 2;
        if !cf.is_empty() {
            call_forwarding += cf.len() as u64 / 2;
            pipe.cmd("HSET").arg(&cf_key).arg(&cf).ignore();
            *n += 1;
        }
        if *n >= BATCH {
            let (pipe, _) = pipes.remove(&node).expect("just used");
            run_pipe(router, node, &pipe)?;
        }
    }
    for (node, (pipe, _)) in pipes {
        run_pipe(router, node, &pipe)?;
    }
    Ok(call_forwarding)
}

fn run_pipe(router: &mut Router, node: u32, pipe: &redis::Pipeline) -> Result<(), NodeError> {
    let con = router.connection(node)?;
    pipe.query::<()>(con)
        .map_err(|source| NodeError::Redis { node, source })
}

/// Every subscriber's call-forwarding rows, counted at the first node
/// (every node holds a replica).
pub fn count_call_forwarding(router: &mut Router, layout: &Layout) -> Result<u64, NodeError> {
    let node = router.nodes()[0].id;
    let mut total = 0u64;
    let subscribers: Vec<u64> = (0..layout.subscribers()).collect();
    for chunk in subscribers.chunks(BATCH) {
        let mut pipe = redis::pipe();
        for &s_id in chunk {
            pipe.cmd("HLEN").arg(&layout.keys(s_id)[1]);
        }
        let con = router.connection(node)?;
        let counts: Vec<u64> = pipe
            .query(con)
            .map_err(|source| NodeError::Redis { node, source })?;
        total += counts.iter().sum::<u64>();
    }
    Ok(total)
}

/// Bugs planted to show that the call-forwarding count catches a lost
/// write (`cli/tests/tatp.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlantedBugs {
    /// Roost's INSERT_CALL_FORWARDING reports an insert it did not make.
    pub insert_skips_row: bool,
}

/// The scripts' SHA-1s, loaded at every node: Roost's (with any planted
/// bug) and the baselines'.
#[derive(Debug, Clone)]
pub struct Scripts {
    roost: HashMap<TxnKind, String>,
    baseline: HashMap<TxnKind, String>,
}

impl Scripts {
    pub fn load(router: &mut Router, bugs: PlantedBugs) -> Result<Scripts, NodeError> {
        let mut roost = HashMap::new();
        let mut baseline = HashMap::new();
        for (kind, _) in MIX {
            roost.insert(kind, load_script(router, kind.script(bugs))?);
            baseline.insert(
                kind,
                load_script(router, kind.script(PlantedBugs::default()))?,
            );
        }
        Ok(Scripts { roost, baseline })
    }
}

/// One transaction to run: its kind, subscriber and arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub kind: TxnKind,
    pub s_id: u64,
    pub args: Vec<String>,
}

/// The next transaction of a client at node position `p`: the kind by the
/// mix; the subscriber by NURand among `p`'s, or (with probability
/// `remote`) among another node's; the arguments as the spec draws them.
pub fn next_txn(parts: &Partitions, p: usize, remote: f64, rng: &mut SmallRng) -> Txn {
    let kind = TxnKind::pick(rng.random_range(0..100));
    let nodes = parts.subscribers.len();
    let from = if nodes > 1 && rng.random_bool(remote) {
        (p + rng.random_range(1..nodes)) % nodes
    } else {
        p
    };
    let pool = &parts.subscribers[from];
    let s_id = pool[nurand(rng, pool.len() as u64) as usize];
    let sf = rng.random_range(1..=4u32);
    let start = START_TIMES[rng.random_range(0..3)];
    let nbr = Layout::sub_nbr(s_id);
    let args = match kind {
        TxnKind::GetSubscriberData => Vec::new(),
        TxnKind::GetNewDestination => vec![
            sf.to_string(),
            start.to_string(),
            rng.random_range(1..=24u32).to_string(),
        ],
        TxnKind::GetAccessData => vec![rng.random_range(1..=4u32).to_string()],
        TxnKind::UpdateSubscriberData => vec![
            rng.random_range(0..2u8).to_string(),
            sf.to_string(),
            format!("{:0>3}", rng.random::<u8>()),
        ],
        TxnKind::UpdateLocation => vec![rng.random::<u32>().to_string(), s_id.to_string()],
        TxnKind::InsertCallForwarding => vec![
            sf.to_string(),
            start.to_string(),
            (start + rng.random_range(1..=8u32)).to_string(),
            nbr,
            s_id.to_string(),
        ],
        TxnKind::DeleteCallForwarding => {
            vec![sf.to_string(), start.to_string(), s_id.to_string()]
        }
    };
    Txn { kind, s_id, args }
}

/// One client's tally.
#[derive(Debug)]
pub struct ClientResult {
    /// Transactions answered (a spec's expected miss too).
    pub committed: u64,
    /// Of them, the ones that found (or changed) their rows.
    pub succeeded: u64,
    pub reads: u64,
    /// Transactions whose subscriber another node owned at the start.
    pub remote: u64,
    pub cf_inserted: u64,
    pub cf_deleted: u64,
    pub latency_ns: Histogram<u64>,
    pub error: Option<String>,
}

/// Why a transaction failed.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("node {node} answered {what} with {reply:?}")]
    Reply {
        node: u32,
        what: &'static str,
        reply: Value,
    },
}

/// Runs `txn` (its subscriber's reactor owned by `owner` at the cell's
/// start); whether it found or changed its rows.
fn run_txn(
    system: System,
    router: &mut Router,
    scripts: &Scripts,
    layout: &Layout,
    (home, owner): (u32, u32),
    txn: &Txn,
) -> Result<bool, TxnError> {
    let keys = layout.keys(txn.s_id);
    let (node, sha) = match system {
        // The request runs where it arrived; reads on the local replica.
        System::Roost | System::Perfect => (home, &scripts.roost[&txn.kind]),
        System::Static2pc => (owner, &scripts.baseline[&txn.kind]),
    };
    let cmd = if txn.kind.is_read_only() {
        evalsha_ro(sha, &keys, &txn.args)
    } else {
        evalsha(sha, &keys, &txn.args)
    };
    match query(router, node, &cmd)? {
        Value::Int(n @ (0 | 1)) => Ok(n == 1),
        reply => Err(TxnError::Reply {
            node,
            what: txn.kind.name(),
            reply,
        }),
    }
}

/// Runs one client at node position `p` until `stop`, counting while
/// `counting`.
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
    let home = layout.nodes[p].id;
    let mut result = ClientResult {
        committed: 0,
        succeeded: 0,
        reads: 0,
        remote: 0,
        cf_inserted: 0,
        cf_deleted: 0,
        latency_ns: latency_histogram(),
        error: None,
    };
    let remote = if system == System::Perfect {
        0.0
    } else {
        remote
    };
    while !stop.load(Ordering::Relaxed) {
        let txn = next_txn(parts, p, remote, &mut rng);
        let started = Instant::now();
        let owner = parts.owner_of_tag[layout.tag(txn.s_id)];
        let found = match run_txn(system, router, scripts, layout, (home, owner), &txn) {
            Ok(found) => found,
            Err(e) => {
                result.error = Some(e.to_string());
                break;
            }
        };
        // Counted whenever they happen: the check needs every change.
        match (txn.kind, found) {
            (TxnKind::InsertCallForwarding, true) => result.cf_inserted += 1,
            (TxnKind::DeleteCallForwarding, true) => result.cf_deleted += 1,
            _ => {}
        }
        if counting.load(Ordering::Relaxed) {
            record(&mut result.latency_ns, started);
            result.committed += 1;
            result.succeeded += u64::from(found);
            result.reads += u64::from(txn.kind.is_read_only());
            result.remote += u64::from(owner != home);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(per_node: u64) -> Layout {
        let nodes = crate::cluster_load::unreachable_nodes(3);
        let owned = (0..3)
            .map(|p| (0..10).map(|i| format!("{p}-{i}")).collect())
            .collect();
        Layout::new(
            Params {
                subscribers_per_node: per_node,
            },
            nodes,
            owned,
        )
    }

    fn parts(l: &Layout) -> Partitions {
        let owners = l
            .all_tags()
            .map(|t| (t.clone(), t[..1].parse::<u32>().unwrap()))
            .collect();
        Partitions::new(l, owners)
    }

    #[test]
    fn the_mix_is_the_specs() {
        let mut counts: HashMap<TxnKind, u32> = HashMap::new();
        for draw in 0..100 {
            *counts.entry(TxnKind::pick(draw)).or_default() += 1;
        }
        for (kind, percent) in MIX {
            assert_eq!(counts[&kind], percent, "{}", kind.name());
        }
        let reads: u32 = MIX
            .iter()
            .filter(|(k, _)| k.is_read_only())
            .map(|(_, p)| p)
            .sum();
        assert_eq!(reads, 80);
    }

    #[test]
    fn nurand_is_skewed_and_in_range() {
        let mut rng = SmallRng::seed_from_u64(7);
        let n = 100_000u64;
        let mut low_half = 0;
        for _ in 0..100_000 {
            let x = nurand(&mut rng, n);
            assert!(x < n);
            low_half += u64::from(x < 65_536);
        }
        // OR-ing in the low 16 bits piles draws below 65,536: far more
        // than the 65.5 % a uniform draw puts there.
        assert!(low_half > 75_000, "{low_half}");
    }

    #[test]
    fn the_remote_knob_is_the_share_of_transactions_on_other_nodes() {
        let l = layout(3_000);
        let parts = parts(&l);
        assert_eq!(parts.sizes(), vec![3_000; 3]);
        let mut rng = SmallRng::seed_from_u64(11);
        for remote in [0.0, 0.01, 0.2] {
            let mut away = 0;
            for _ in 0..50_000 {
                let t = next_txn(&parts, 1, remote, &mut rng);
                away += u32::from(parts.owner_of_tag[l.tag(t.s_id)] != 1);
            }
            let share = f64::from(away) / 50_000.0;
            assert!((share - remote).abs() < 0.005, "remote {remote}: {share}");
        }
    }

    #[test]
    fn the_loaded_rows_are_the_specs_populations() {
        let mut rng = SmallRng::seed_from_u64(5);
        let (mut facilities, mut forwards, mut n) = (0usize, 0usize, 0usize);
        for s_id in 0..2_000 {
            let (sub, cf) = rows(s_id, &mut rng);
            let fields: Vec<&String> = sub.iter().step_by(2).collect();
            let access = fields.iter().filter(|f| f.starts_with('a')).count();
            let special = fields.iter().filter(|f| f.starts_with('f')).count();
            assert!((1..=4).contains(&access) && (1..=4).contains(&special));
            facilities += special;
            forwards += cf.len() / 2;
            n += 1;
        }
        // 2.5 facilities and 1.5 forwards per facility on average.
        let per_sub = facilities as f64 / n as f64;
        assert!((per_sub - 2.5).abs() < 0.1, "{per_sub}");
        let per_facility = forwards as f64 / facilities as f64;
        assert!((per_facility - 1.5).abs() < 0.1, "{per_facility}");
    }
}

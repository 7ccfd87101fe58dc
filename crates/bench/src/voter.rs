//! Voter, the Zeus seed's popular contestant (its Figure 12, second
//! experiment; `../shared/reference/benchmarks.md` §1.3), over a Roost
//! cluster's RESP ports.
//!
//! Objects: each contestant's total and per-state tally (BenchBase's
//! votes-by-contestant-and-state view) in a reactor of her own (a hash tag
//! each), contestants spread over the nodes round robin; each voter's vote
//! count, voters grouped into reactors of their home node. The first
//! [`Params::hot`] contestants are popular (one in the seed's experiment):
//! a share of the voters (the *popular voters*, in reactors of their own,
//! each reactor's voters for one of them) vote only for her; every other
//! voter votes for a contestant of its own node, so those votes are local
//! transactions. With [`Params::hot_together`] the popular contestants all
//! start at the first node (the load balancer's experiment: they must be
//! spread).
//!
//! A vote is one script (`EVALSHA`) on the contestant's total, her tally
//! and the voter's count: a voter who has voted `max_votes` times is
//! refused (BenchBase's limit, 1,000); otherwise the three are incremented.
//! It runs at the node the client's router names for the contestant, so
//! the popular voters' reactors move to wherever she is.
//!
//! **Checked, not assumed.** Each client counts the votes each of its
//! voters cast and each contestant received; after a run every total,
//! every tally and every voter's count is read back and compared.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_client::{redis, NodeAddr, Router, Value};

use crate::cluster_load::{
    evalsha, latency_histogram, load_script, mset, query, record, NodeError,
};

/// The popular contestant.
pub const POPULAR: u32 = 0;

/// Workload sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub contestants: u32,
    pub voters_per_node: u64,
    pub voters_per_reactor: u64,
    /// Share of each node's voters that vote for the popular contestant.
    pub popular_fraction: f64,
    /// Votes a voter may cast (more are refused).
    pub max_votes: u64,
    /// Popular contestants: the first `hot` (at least 1).
    pub hot: u32,
    /// Whether the popular contestants all start at the first node (else
    /// round robin, as the others).
    pub hot_together: bool,
}

impl Params {
    /// Why these sizes cannot run on `nodes` nodes, if they cannot.
    pub fn invalid(&self, nodes: usize) -> Option<String> {
        if self.hot == 0 {
            return Some("--hot: at least 1 popular contestant".to_owned());
        }
        let need = u64::from(self.hot) + nodes as u64;
        if u64::from(self.contestants) < need {
            return Some(format!(
                "--contestants {}: at least {need} (the {} popular, and another on each of the {nodes} nodes)",
                self.contestants, self.hot
            ));
        }
        if !(self.popular_fraction > 0.0 && self.popular_fraction < 1.0) {
            return Some(format!(
                "--popular {}: a share of the voters in (0, 1)",
                self.popular_fraction
            ));
        }
        let popular = self.popular_per_node();
        if popular == 0 || popular == self.voters_per_node {
            return Some(format!(
                "--popular {} of {} voters per node leaves no popular voter or no other voter",
                self.popular_fraction, self.voters_per_node
            ));
        }
        if self.voters_per_reactor == 0 || self.max_votes == 0 {
            return Some("--voters-per-reactor and --max-votes: at least 1".to_owned());
        }
        if self.popular_reactors() < u64::from(self.hot) {
            return Some(format!(
                "{popular} popular voters per node in reactors of {} are fewer reactors than the {} popular contestants",
                self.voters_per_reactor, self.hot
            ));
        }
        None
    }

    /// Contestant `c`'s node (by position) when loaded, of `nodes`.
    pub fn home_of(&self, c: u32, nodes: usize) -> usize {
        if self.hot_together && c < self.hot {
            0
        } else {
            c as usize % nodes
        }
    }

    /// Popular voters per node.
    pub fn popular_per_node(&self) -> u64 {
        (self.popular_fraction * self.voters_per_node as f64).round() as u64
    }

    fn popular_reactors(&self) -> u64 {
        self.popular_per_node().div_ceil(self.voters_per_reactor)
    }

    fn other_reactors(&self) -> u64 {
        (self.voters_per_node - self.popular_per_node()).div_ceil(self.voters_per_reactor)
    }
}

/// Where the objects live: one tag (reactor) per contestant and per group
/// of voters.
pub struct Layout {
    pub params: Params,
    pub nodes: Vec<NodeAddr>,
    contestant_tags: Vec<String>,
    /// Per node (by position): its voters' reactors' tags, the popular
    /// voters' first.
    voter_tags: Vec<Vec<String>>,
    /// Per node: its contestants other than the popular one.
    local_contestants: Vec<Vec<u32>>,
    /// Per node: a reactor nothing else uses, which stays there.
    anchor_tags: Vec<String>,
}

impl Layout {
    /// `owned[p]`: the tags of reactors node `p` owns; it needs one per
    /// contestant of the node and per group of its voters, and an anchor.
    pub fn new(
        params: Params,
        nodes: Vec<NodeAddr>,
        owned: Vec<Vec<String>>,
    ) -> Result<Layout, String> {
        if let Some(why) = params.invalid(nodes.len()) {
            return Err(why);
        }
        let n = nodes.len();
        let voter_reactors = (params.popular_reactors() + params.other_reactors()) as usize;
        let mut next = vec![0usize; n];
        let mut contestant_tags = Vec::new();
        let mut local_contestants = vec![Vec::new(); n];
        for c in 0..params.contestants {
            let p = params.home_of(c, n);
            let tag = owned[p].get(next[p]).cloned().unwrap_or_default();
            next[p] += 1;
            contestant_tags.push(tag);
            if c >= params.hot {
                local_contestants[p].push(c);
            }
        }
        assert!(
            local_contestants.iter().all(|l| !l.is_empty()),
            "Params::invalid leaves every node a contestant of its own"
        );
        let mut voter_tags = Vec::new();
        let mut anchor_tags = Vec::new();
        for (p, tags) in owned.iter().enumerate() {
            let need = next[p] + voter_reactors + 1;
            if tags.len() < need {
                return Err(format!(
                    "node {p} owns {} reactors, fewer than its {need} contestants, groups of voters and anchor: more --reactors",
                    tags.len()
                ));
            }
            voter_tags.push(tags[next[p]..need - 1].to_vec());
            anchor_tags.push(tags[need - 1].clone());
        }
        Ok(Layout {
            params,
            nodes,
            contestant_tags,
            voter_tags,
            local_contestants,
            anchor_tags,
        })
    }

    pub fn voters(&self) -> u64 {
        self.params.voters_per_node * self.nodes.len() as u64
    }

    /// A contestant's node (by position) when loaded.
    pub fn contestant_home(&self, c: u32) -> usize {
        self.params.home_of(c, self.nodes.len())
    }

    /// The node position of node id `node`.
    pub fn position(&self, node: u32) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == node)
    }

    /// A voter's home node (by position) and index there.
    fn home(&self, voter: u64) -> (usize, u64) {
        let n = self.params.voters_per_node;
        ((voter / n) as usize, voter % n)
    }

    pub fn is_popular(&self, voter: u64) -> bool {
        self.home(voter).1 < self.params.popular_per_node()
    }

    /// The popular contestant a popular voter votes for: one per reactor of
    /// popular voters, so each such reactor is used with one contestant.
    pub fn hot_of(&self, voter: u64) -> u32 {
        debug_assert!(self.is_popular(voter));
        let reactor = self.home(voter).1 / self.params.voters_per_reactor;
        (reactor % u64::from(self.params.hot)) as u32
    }

    fn voter_tag(&self, voter: u64) -> &str {
        let (p, i) = self.home(voter);
        let popular = self.params.popular_per_node();
        let r = self.params.voters_per_reactor;
        let reactor = if i < popular {
            i / r
        } else {
            self.params.popular_reactors() + (i - popular) / r
        };
        &self.voter_tags[p][reactor as usize]
    }

    pub fn total_key(&self, c: u32) -> String {
        format!("vo:{{{}}}:total", self.contestant_tags[c as usize])
    }

    pub fn tally_key(&self, c: u32) -> String {
        format!("vo:{{{}}}:states", self.contestant_tags[c as usize])
    }

    pub fn voter_key(&self, voter: u64) -> String {
        format!("vo:{{{}}}:v:{voter}", self.voter_tag(voter))
    }

    /// A key of node `p`'s anchor: a reactor of its own that nothing else
    /// writes, so a write naming it runs there.
    pub fn anchor_key(&self, p: usize) -> String {
        format!("vo:{{{}}}:anchor", self.anchor_tags[p])
    }

    /// A key of each reactor of popular contestant `c`'s voters (to ask
    /// where they are).
    pub fn popular_reactor_keys(&self, c: u32) -> Vec<String> {
        assert!(c < self.params.hot, "contestant {c} is not a popular one");
        let r = self.params.voters_per_reactor;
        (0..self.nodes.len() as u64)
            .flat_map(|p| {
                (0..self.params.popular_per_node())
                    .step_by(r as usize)
                    .map(move |i| p * self.params.voters_per_node + i)
            })
            .filter(|&v| self.hot_of(v) == c)
            .map(|v| self.voter_key(v))
            .collect()
    }

    /// Every tag in use.
    pub fn all_tags(&self) -> impl Iterator<Item = &String> {
        self.contestant_tags
            .iter()
            .chain(self.voter_tags.iter().flatten())
            .chain(&self.anchor_tags)
    }
}

/// The states voters call from (BenchBase maps area codes to them).
const STATES: [&str; 51] = [
    "AL", "AK", "AZ", "AR", "CA", "CO", "CT", "DE", "DC", "FL", "GA", "HI", "ID", "IL", "IN", "IA",
    "KS", "KY", "LA", "ME", "MD", "MA", "MI", "MN", "MS", "MO", "MT", "NE", "NV", "NH", "NJ", "NM",
    "NY", "NC", "ND", "OH", "OK", "OR", "PA", "RI", "SC", "SD", "TN", "TX", "UT", "VT", "VA", "WA",
    "WV", "WI", "WY",
];

fn state_of(voter: u64) -> &'static str {
    STATES[(voter.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % STATES.len()]
}

/// Every total and voter count back to 0 and every tally emptied: each
/// contestant's at her first node, each voter's at its home node, except
/// the popular voters', written at their contestant's first node (where
/// they follow her; a run starts with them there).
pub fn reset(router: &mut Router, layout: &Layout) -> Result<(), NodeError> {
    let n = layout.nodes.len();
    let mut by_node: Vec<Vec<String>> = vec![Vec::new(); n];
    let mut tallies: Vec<Vec<String>> = vec![Vec::new(); n];
    for c in 0..layout.params.contestants {
        let p = layout.contestant_home(c);
        by_node[p].extend([layout.total_key(c), "0".to_owned()]);
        tallies[p].push(layout.tally_key(c));
    }
    for voter in 0..layout.voters() {
        let p = if layout.is_popular(voter) {
            layout.contestant_home(layout.hot_of(voter))
        } else {
            layout.home(voter).0
        };
        by_node[p].extend([layout.voter_key(voter), "0".to_owned()]);
    }
    for (p, pairs) in by_node.iter().enumerate() {
        let node = layout.nodes[p].id;
        for chunk in pairs.chunks(2_000) {
            mset(router, node, chunk)?;
        }
        if !tallies[p].is_empty() {
            let mut del = redis::cmd("DEL");
            for key in &tallies[p] {
                del.arg(key);
            }
            query(router, node, &del)?;
        }
    }
    Ok(())
}

/// The vote: KEYS the contestant's total, her tally, the voter's count;
/// ARGV the limit, the voter's state, and whether to count the voter's
/// vote ("1"; the planted bug passes "0"). 0: voted; 2: over the limit.
const VOTE: &str = "local n = tonumber(redis.call('GET', KEYS[3]) or '0') \
     if n >= tonumber(ARGV[1]) then return 2 end \
     if ARGV[3] == '1' then redis.call('INCR', KEYS[3]) end \
     redis.call('HINCRBY', KEYS[2], ARGV[2], 1) \
     redis.call('INCR', KEYS[1]) \
     return 0";

/// A move: KEYS a contestant's total and the destination's anchor. Naming a
/// reactor the destination owns makes it run the write itself (a node that
/// lost the contestant lately would otherwise ship a write on her alone to
/// her owner, `roost_node::forward`), so she moves there.
const TAKE: &str = "redis.call('SET', KEYS[2], '1') \
     return redis.call('INCRBY', KEYS[1], 0)";

/// Bugs planted to show that the check catches a lost write
/// (`cli/tests/voter.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlantedBugs {
    /// The vote does not count the voter's vote.
    pub skip_voter_count: bool,
}

/// The vote script's SHA-1, loaded at every node, and the planted bugs.
#[derive(Debug, Clone)]
pub struct Scripts {
    pub bugs: PlantedBugs,
    vote: String,
    take: String,
}

impl Scripts {
    pub fn load(router: &mut Router) -> Result<Scripts, NodeError> {
        Ok(Scripts {
            bugs: PlantedBugs::default(),
            vote: load_script(router, VOTE)?,
            take: load_script(router, TAKE)?,
        })
    }
}

/// Writes contestant `c` at node position `p` with its anchor, which takes
/// her there; her total.
pub fn take(
    router: &mut Router,
    scripts: &Scripts,
    layout: &Layout,
    c: u32,
    p: usize,
) -> Result<i64, VoteError> {
    let node = layout.nodes[p].id;
    let keys = [layout.total_key(c), layout.anchor_key(p)];
    match query(router, node, &evalsha(&scripts.take, &keys, &[] as &[&str]))? {
        Value::Int(total) => Ok(total),
        reply => Err(VoteError::Reply {
            node,
            what: "a move",
            reply,
        }),
    }
}

/// Why a vote failed.
#[derive(Debug, thiserror::Error)]
pub enum VoteError {
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
}

/// When the measured window opened (set by the first client to see it
/// open), and the width of its time buckets.
pub struct Timeline {
    pub origin: OnceLock<Instant>,
    pub bucket: Duration,
    pub buckets: usize,
}

impl Timeline {
    pub fn new(bucket: Duration, seconds: f64) -> Timeline {
        Timeline {
            origin: OnceLock::new(),
            bucket,
            buckets: (seconds / bucket.as_secs_f64()).ceil() as usize,
        }
    }

    /// The bucket of now, once the window opened.
    fn bucket_now(&self) -> usize {
        let origin = *self.origin.get_or_init(Instant::now);
        (origin.elapsed().as_nanos() / self.bucket.as_nanos()) as usize
    }
}

/// One client's tally.
#[derive(Debug)]
pub struct ClientResult {
    /// Votes accepted and refused, from the start to the stop.
    pub accepted: u64,
    pub rejected: u64,
    /// Votes accepted per contestant, from the start to the stop.
    pub by_contestant: Vec<u64>,
    /// Votes accepted in the window, per time bucket: for the popular
    /// contestants and for the others.
    pub popular_buckets: Vec<u64>,
    pub other_buckets: Vec<u64>,
    /// Votes accepted in the window per node (by position) it was sent to,
    /// per time bucket.
    pub node_buckets: Vec<Vec<u64>>,
    pub latency_ns: Histogram<u64>,
    /// Each of its voters and the votes it cast.
    pub voters: Vec<(u64, u64)>,
    pub error: Option<String>,
}

impl ClientResult {
    /// Votes accepted in the window.
    pub fn counted(&self) -> u64 {
        self.popular_buckets.iter().sum::<u64>() + self.other_buckets.iter().sum::<u64>()
    }
}

/// One vote; whether it was accepted, and the node it was sent to.
fn vote(
    router: &mut Router,
    scripts: &Scripts,
    layout: &Layout,
    voter: u64,
    c: u32,
) -> Result<(bool, u32), VoteError> {
    let total = layout.total_key(c);
    let node = router.route(&[total.as_bytes()])?;
    let keys = [total, layout.tally_key(c), layout.voter_key(voter)];
    let count = if scripts.bugs.skip_voter_count {
        "0"
    } else {
        "1"
    };
    let max = layout.params.max_votes.to_string();
    let args = [max.as_str(), state_of(voter), count];
    match query(router, node, &evalsha(&scripts.vote, &keys, &args))? {
        Value::Int(0) => Ok((true, node)),
        Value::Int(2) => Ok((false, node)),
        reply => Err(VoteError::Reply {
            node,
            what: "a vote",
            reply,
        }),
    }
}

/// Runs one client over `voters` of node position `p` until `stop`,
/// counting while `counting`.
#[allow(clippy::too_many_arguments)]
pub fn run_client(
    router: &mut Router,
    scripts: &Scripts,
    layout: &Layout,
    p: usize,
    voters: Vec<u64>,
    seed: u64,
    stop: &AtomicBool,
    counting: &AtomicBool,
    timeline: &Timeline,
) -> ClientResult {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut result = ClientResult {
        accepted: 0,
        rejected: 0,
        by_contestant: vec![0; layout.params.contestants as usize],
        popular_buckets: vec![0; timeline.buckets],
        other_buckets: vec![0; timeline.buckets],
        node_buckets: vec![vec![0; timeline.buckets]; layout.nodes.len()],
        latency_ns: latency_histogram(),
        voters: voters.into_iter().map(|v| (v, 0)).collect(),
        error: None,
    };
    let local = &layout.local_contestants[p];
    while !stop.load(Ordering::Relaxed) && !result.voters.is_empty() {
        let i = rng.random_range(0..result.voters.len());
        let voter = result.voters[i].0;
        let c = if layout.is_popular(voter) {
            layout.hot_of(voter)
        } else {
            local[rng.random_range(0..local.len())]
        };
        let started = Instant::now();
        match vote(router, scripts, layout, voter, c) {
            Ok((true, node)) => {
                result.accepted += 1;
                result.voters[i].1 += 1;
                result.by_contestant[c as usize] += 1;
                if counting.load(Ordering::Relaxed) {
                    record(&mut result.latency_ns, started);
                    let b = timeline.bucket_now();
                    let buckets = if c < layout.params.hot {
                        &mut result.popular_buckets
                    } else {
                        &mut result.other_buckets
                    };
                    if let Some(n) = buckets.get_mut(b) {
                        *n += 1;
                    }
                    let at = layout
                        .position(node)
                        .and_then(|p| result.node_buckets.get_mut(p).and_then(|v| v.get_mut(b)));
                    if let Some(n) = at {
                        *n += 1;
                    }
                }
            }
            Ok((false, _)) => result.rejected += 1,
            Err(e) => {
                result.error = Some(e.to_string());
                // Its outcome is unknown: this voter is not checked.
                result.voters.swap_remove(i);
                break;
            }
        }
    }
    result
}

/// The voters of client `c` of `clients` on node position `p`.
pub fn client_voters(layout: &Layout, p: usize, c: u64, clients: u64) -> Vec<u64> {
    let n = layout.params.voters_per_node;
    (0..n)
        .filter(|i| i % clients == c)
        .map(|i| p as u64 * n + i)
        .collect()
}

/// What the read-back found.
#[derive(Debug, Default)]
pub struct Checked {
    /// The contestants' totals summed.
    pub votes: u64,
    pub voters: usize,
    /// Totals, tallies and voter counts that disagree, with the first.
    pub wrong_totals: usize,
    pub wrong_tallies: usize,
    pub wrong_voters: usize,
    pub first: Option<String>,
}

fn int_of(value: &Value) -> Option<u64> {
    match value {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// A value read back, as a message shows it.
fn shown(value: &Value) -> String {
    int_of(value).map_or_else(|| format!("{value:?}"), |n| n.to_string())
}

/// Reads back every contestant's total and tally (at any node: they are
/// replicated) and the count of every voter in `voters`, and compares them
/// with `by_contestant` (the votes the clients saw accepted) and `voters`
/// (each voter's votes): a voter's count must also be at most the limit.
pub fn check(
    router: &mut Router,
    layout: &Layout,
    by_contestant: &[u64],
    voters: &[(u64, u64)],
) -> Result<Checked, VoteError> {
    let node = router.nodes()[0].id;
    let mut checked = Checked {
        voters: voters.len(),
        ..Checked::default()
    };
    let mget = |router: &mut Router, keys: &[String]| -> Result<Vec<Value>, VoteError> {
        let mut cmd = redis::cmd("MGET");
        for key in keys {
            cmd.arg(key);
        }
        match query(router, node, &cmd)? {
            Value::Array(values) if values.len() == keys.len() => Ok(values),
            reply => Err(VoteError::Reply {
                node,
                what: "MGET",
                reply,
            }),
        }
    };
    let contestants: Vec<u32> = (0..layout.params.contestants).collect();
    let totals = mget(
        router,
        &contestants
            .iter()
            .map(|&c| layout.total_key(c))
            .collect::<Vec<_>>(),
    )?;
    for (&c, value) in contestants.iter().zip(&totals) {
        let want = by_contestant[c as usize];
        let got = int_of(value);
        checked.votes += got.unwrap_or(0);
        if got != Some(want) {
            checked.wrong_totals += 1;
            checked.first.get_or_insert(format!(
                "contestant {c}: total {}, the clients counted {want}",
                shown(value)
            ));
        }
        let reply = query(router, node, redis::cmd("HVALS").arg(layout.tally_key(c)))?;
        let Value::Array(states) = &reply else {
            return Err(VoteError::Reply {
                node,
                what: "HVALS",
                reply,
            });
        };
        let tallied: u64 = states.iter().filter_map(int_of).sum();
        if tallied != want {
            checked.wrong_tallies += 1;
            checked.first.get_or_insert(format!(
                "contestant {c}: tallies by state sum to {tallied}, the clients counted {want}"
            ));
        }
    }
    for chunk in voters.chunks(1_000) {
        let keys: Vec<String> = chunk.iter().map(|(v, _)| layout.voter_key(*v)).collect();
        for ((voter, want), value) in chunk.iter().zip(mget(router, &keys)?) {
            let got = int_of(&value);
            if got != Some(*want) || *want > layout.params.max_votes {
                checked.wrong_voters += 1;
                checked.first.get_or_insert(format!(
                    "voter {voter}: count {}, its client counted {want} (limit {})",
                    shown(&value),
                    layout.params.max_votes
                ));
            }
        }
    }
    Ok(checked)
}

/// A Prometheus histogram as a node exports it (`<name>_bucket{le=...}`
/// cumulative, `_sum` in seconds, `_count`), several nodes' summed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromHistogram {
    /// Upper bounds in seconds, the last +Inf.
    pub le_s: Vec<f64>,
    pub cumulative: Vec<u64>,
    pub sum_s: f64,
    pub count: u64,
}

impl PromHistogram {
    /// `name`'s histogram in Prometheus text, if it is there.
    pub fn parse(text: &str, name: &str) -> Option<PromHistogram> {
        let bucket = format!("{name}_bucket{{le=\"");
        let mut h = PromHistogram::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(&bucket) {
                let (le, count) = rest.split_once("\"} ")?;
                h.le_s.push(if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                });
                h.cumulative.push(count.trim().parse::<f64>().ok()? as u64);
            } else if let Some(v) = line.strip_prefix(&format!("{name}_sum ")) {
                h.sum_s = v.trim().parse().ok()?;
            } else if let Some(v) = line.strip_prefix(&format!("{name}_count ")) {
                h.count = v.trim().parse::<f64>().ok()? as u64;
            }
        }
        (!h.le_s.is_empty()).then_some(h)
    }

    /// Adds `other` (the same buckets) to this one; an empty one takes
    /// `other`'s buckets.
    pub fn add(&mut self, other: &PromHistogram) -> Result<(), String> {
        if self.le_s.is_empty() {
            *self = other.clone();
            return Ok(());
        }
        if self.le_s != other.le_s {
            return Err("histograms with different buckets".to_owned());
        }
        for (a, b) in self.cumulative.iter_mut().zip(&other.cumulative) {
            *a += b;
        }
        self.sum_s += other.sum_s;
        self.count += other.count;
        Ok(())
    }

    /// What was recorded after `before` (an earlier sample of the same).
    pub fn since(&self, before: &PromHistogram) -> PromHistogram {
        if before.le_s != self.le_s {
            return self.clone();
        }
        PromHistogram {
            le_s: self.le_s.clone(),
            cumulative: self
                .cumulative
                .iter()
                .zip(&before.cumulative)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            sum_s: (self.sum_s - before.sum_s).max(0.0),
            count: self.count.saturating_sub(before.count),
        }
    }

    /// Per bucket (not cumulative).
    pub fn per_bucket(&self) -> Vec<u64> {
        let mut below = 0;
        self.cumulative
            .iter()
            .map(|&c| {
                let n = c.saturating_sub(below);
                below = c;
                n
            })
            .collect()
    }

    pub fn mean_us(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_s / self.count as f64 * 1e6
        }
    }

    /// The upper bound (µs) of the bucket holding quantile `q`: an upper
    /// bound of the quantile, as coarse as the buckets.
    pub fn quantile_bound_us(&self, q: f64) -> f64 {
        let total = self.cumulative.last().copied().unwrap_or(0);
        if total == 0 {
            return 0.0;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        self.le_s
            .iter()
            .zip(&self.cumulative)
            .find(|(_, &c)| c >= rank)
            .map_or(f64::INFINITY, |(&le, _)| le * 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS: Params = Params {
        contestants: 20,
        voters_per_node: 100,
        voters_per_reactor: 10,
        popular_fraction: 0.1,
        max_votes: 5,
        hot: 1,
        hot_together: false,
    };

    fn layout_of(params: Params, tags_per_node: usize) -> Layout {
        let nodes = crate::cluster_load::unreachable_nodes(3);
        let owned = (0..3)
            .map(|p| (0..tags_per_node).map(|i| format!("{p}-{i}")).collect())
            .collect();
        Layout::new(params, nodes, owned).unwrap()
    }

    fn layout() -> Layout {
        layout_of(PARAMS, 21)
    }

    #[test]
    fn popular_contestants_together_start_at_the_first_node_each_with_her_voters() {
        let params = Params {
            popular_fraction: 0.6,
            hot: 3,
            hot_together: true,
            ..PARAMS
        };
        let l = layout_of(params, 30);
        for c in 0..3 {
            assert_eq!(l.contestant_home(c), 0);
            // 60 popular voters per node, 6 reactors, two per contestant.
            let keys = l.popular_reactor_keys(c);
            assert_eq!(keys.len(), 6, "{keys:?}");
        }
        // Each popular voters' reactor votes for one contestant.
        let mut contestant_of_tag = std::collections::HashMap::new();
        for v in (0..300).filter(|&v| l.is_popular(v)) {
            let c = l.hot_of(v);
            assert!(c < 3);
            let before = contestant_of_tag.insert(l.voter_tag(v).to_owned(), c);
            assert!(before.is_none_or(|b| b == c), "voter {v}");
        }
        assert_eq!(contestant_of_tag.len(), 18);
        // The others round robin; every node keeps a contestant of its own.
        for (p, local) in l.local_contestants.iter().enumerate() {
            assert!(!local.is_empty());
            assert!(local.iter().all(|&c| c >= 3 && l.contestant_home(c) == p));
        }
        let too_few = Params {
            voters_per_node: 20,
            ..params
        };
        assert!(too_few.invalid(3).unwrap().contains("fewer reactors"));
        let none = Params { hot: 0, ..params };
        assert!(none.invalid(3).unwrap().contains("--hot"));
    }

    #[test]
    fn popular_voters_have_reactors_of_their_own_and_others_vote_locally() {
        let l = layout();
        // 10 popular voters per node: one reactor; 90 others: nine.
        for p in 0..3u64 {
            let popular: Vec<u64> = (0..100)
                .map(|i| p * 100 + i)
                .filter(|&v| l.is_popular(v))
                .collect();
            assert_eq!(popular.len(), 10);
            let tags: std::collections::HashSet<&str> =
                popular.iter().map(|&v| l.voter_tag(v)).collect();
            assert_eq!(tags.len(), 1);
            assert!(l
                .popular_reactor_keys(POPULAR)
                .contains(&l.voter_key(popular[0])));
            for v in (0..100).map(|i| p * 100 + i).filter(|&v| !l.is_popular(v)) {
                assert!(
                    !tags.contains(l.voter_tag(v)),
                    "voter {v} shares her voters' reactor"
                );
            }
        }
        for (p, local) in l.local_contestants.iter().enumerate() {
            assert!(!local.is_empty());
            assert!(local
                .iter()
                .all(|&c| c != POPULAR && l.contestant_home(c) == p));
        }
        // Contestants round robin, each her own reactor.
        let tags: std::collections::HashSet<&String> = l.contestant_tags.iter().collect();
        assert_eq!(tags.len(), 20);
        assert_eq!(l.contestant_tags[4], "1-1");
        assert_eq!(l.popular_reactor_keys(POPULAR).len(), 3);
        assert_eq!(l.all_tags().count(), 20 + 3 * 10 + 3);
        assert!(l.anchor_key(2).contains("{2-16}"));
    }

    #[test]
    fn bad_sizes_are_refused() {
        let params = Params {
            contestants: 3,
            ..PARAMS
        };
        assert!(params.invalid(3).unwrap().contains("--contestants"));
        let nan = Params {
            contestants: 20,
            popular_fraction: f64::NAN,
            ..params
        };
        assert!(nan.invalid(3).unwrap().contains("--popular"));
    }

    #[test]
    fn histograms_sum_diff_and_give_bucket_bounds() {
        let text = "x_bucket{le=\"0.000025\"} 2\nx_bucket{le=\"0.00005\"} 3\n\
                    x_bucket{le=\"0.0001\"} 10\nx_bucket{le=\"+Inf\"} 10\nx_sum 0.0005\nx_count 10\n";
        let one = PromHistogram::parse(text, "x").unwrap();
        let mut two = PromHistogram::default();
        two.add(&one).unwrap();
        two.add(&one).unwrap();
        assert_eq!(two.cumulative, vec![4, 6, 20, 20]);
        let d = two.since(&one);
        assert_eq!(d, one);
        assert_eq!(d.per_bucket(), vec![2, 1, 7, 0]);
        assert!((d.mean_us() - 50.0).abs() < 1e-9);
        assert_eq!(d.quantile_bound_us(0.2), 25.0);
        assert_eq!(d.quantile_bound_us(0.3), 50.0);
        assert_eq!(d.quantile_bound_us(0.99), 100.0);
        assert!(PromHistogram::parse("y_total 3\n", "x").is_none());
    }
}

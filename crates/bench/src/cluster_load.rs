//! What the cluster workloads ([`crate::smallbank`], [`crate::handover`])
//! share: scripts loaded at every node and called by SHA-1, commands sent to
//! several nodes before any reply is read (a 2PC phase), the back-off of a
//! transaction that met a lock, and the measured window of a cell (clients
//! started, routes followed, one second of warm-up, counting, stop).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::Rng;
use roost_client::{redis, Cmd, NodeAddr, RouteTable, Router, Value};

/// Which way a workload's transactions run: `Roost` (routed; ownership
/// moves what a transaction lacks), `Static2pc` (nothing moves; a
/// transaction across nodes is a two-phase commit) or `Perfect` (no
/// transaction crosses nodes, by construction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    Roost,
    Static2pc,
    Perfect,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Roost => "roost",
            System::Static2pc => "static-2pc",
            System::Perfect => "perfect",
        }
    }
}

/// The kind a draw in `0..100` picks from `mix` (kinds with their
/// percentages, which add up to 100).
pub fn pick_by_percent<K: Copy>(mix: &[(K, u32)], draw: u32) -> K {
    assert!(draw < 100, "a percentage draw");
    debug_assert_eq!(mix.iter().map(|(_, p)| p).sum::<u32>(), 100);
    let mut acc = 0;
    for &(kind, percent) in mix {
        acc += percent;
        if draw < acc {
            return kind;
        }
    }
    unreachable!("the mix adds up to 100")
}

/// Nodes at an address nothing listens on, for unit tests of layouts.
#[cfg(test)]
pub(crate) fn unreachable_nodes(n: u32) -> Vec<NodeAddr> {
    (0..n)
        .map(|id| NodeAddr {
            id,
            addr: "127.0.0.1:1".parse().expect("an address"),
        })
        .collect()
}

/// Latencies recorded per transaction: 1 µs to 60 s, in nanoseconds.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("histogram bounds")
}

/// The latencies of several runs, as one histogram of [`latency_histogram`]'s
/// range (every input has that range, so nothing is lost).
pub fn merged_latencies<'a>(runs: impl IntoIterator<Item = &'a Histogram<u64>>) -> Histogram<u64> {
    let mut merged = latency_histogram();
    for run in runs {
        merged.add(run).expect("latency histograms share one range");
    }
    merged
}

/// Records one latency, clamped to the histogram's range.
pub fn record(histogram: &mut Histogram<u64>, started: Instant) {
    let ns = started.elapsed().as_nanos() as u64;
    let _ = histogram.record(ns.clamp(1_000, 60_000_000_000));
}

/// Why a command to a node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Connect(#[from] roost_client::ConnectError),
    #[error("node {node}: {source}")]
    Redis {
        node: u32,
        source: redis::RedisError,
    },
    #[error("node {node} answered {what} with {reply:?}")]
    Reply {
        node: u32,
        what: &'static str,
        reply: Value,
    },
}

/// SCRIPT LOAD of `src` at every node of `router`; its SHA-1.
pub fn load_script(router: &mut Router, src: &str) -> Result<String, NodeError> {
    let nodes: Vec<u32> = router.nodes().iter().map(|n| n.id).collect();
    let mut sha = String::new();
    for node in nodes {
        let con = router.connection(node)?;
        sha = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(src)
            .query::<String>(con)
            .map_err(|source| NodeError::Redis { node, source })?;
    }
    Ok(sha)
}

/// EVALSHA of `sha` on `keys` with `args`.
pub fn evalsha<K: AsRef<str>, A: AsRef<str>>(sha: &str, keys: &[K], args: &[A]) -> Cmd {
    script_call("EVALSHA", sha, keys, args)
}

/// EVALSHA_RO of `sha` on `keys` with `args`: a read-only script, which a
/// node runs on its local replica.
pub fn evalsha_ro<K: AsRef<str>, A: AsRef<str>>(sha: &str, keys: &[K], args: &[A]) -> Cmd {
    script_call("EVALSHA_RO", sha, keys, args)
}

fn script_call<K: AsRef<str>, A: AsRef<str>>(
    command: &str,
    sha: &str,
    keys: &[K],
    args: &[A],
) -> Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(sha).arg(keys.len());
    for k in keys {
        cmd.arg(k.as_ref());
    }
    for a in args {
        cmd.arg(a.as_ref());
    }
    cmd
}

/// `cmd` at `node`.
pub fn query(router: &mut Router, node: u32, cmd: &Cmd) -> Result<Value, NodeError> {
    let con = router.connection(node)?;
    cmd.query::<Value>(con)
        .map_err(|source| NodeError::Redis { node, source })
}

/// MSET of `pairs` (key, value, key, value, ...) at `node`, which must
/// answer OK.
pub fn mset(router: &mut Router, node: u32, pairs: &[String]) -> Result<(), NodeError> {
    let mut cmd = redis::cmd("MSET");
    for p in pairs {
        cmd.arg(p);
    }
    match query(router, node, &cmd)? {
        Value::Okay => Ok(()),
        reply => Err(NodeError::Reply {
            node,
            what: "MSET",
            reply,
        }),
    }
}

/// Sends `cmds[i]` to `nodes[i]`, every one before reading any reply.
pub fn send_all(router: &mut Router, nodes: &[u32], cmds: &[Cmd]) -> Result<Vec<Value>, NodeError> {
    assert_eq!(nodes.len(), cmds.len(), "a command per node");
    for (node, cmd) in nodes.iter().zip(cmds) {
        let con = router.connection(*node)?;
        con.send_packed_command(&cmd.get_packed_command())
            .map_err(|source| NodeError::Redis {
                node: *node,
                source,
            })?;
    }
    let mut replies = Vec::with_capacity(nodes.len());
    for node in nodes {
        let con = router.connection(*node)?;
        let reply = con.recv_response().map_err(|source| NodeError::Redis {
            node: *node,
            source,
        })?;
        replies.push(reply);
    }
    Ok(replies)
}

/// Waits before try `attempt + 1` of a transaction that met a lock:
/// 20-200 µs, doubling up to 16 times that.
pub fn back_off(attempt: u32, rng: &mut SmallRng) {
    std::thread::sleep(Duration::from_micros(
        rng.random_range(20..200) << attempt.min(4),
    ));
}

/// How often the routers look at the owners again during a cell.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(250);
/// Warm-up before a cell's window opens.
pub const WARM_UP: Duration = Duration::from_secs(1);

/// Why a cell's window failed.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    #[error("a client thread panicked")]
    ClientPanicked,
    #[error("following ownership: {0}")]
    Follow(#[from] roost_client::RouteError),
}

/// One client thread of a cell: its node's position and its index there,
/// its own router (over the cell's shared routes), its seed, and the
/// cell's stop and counting flags.
pub struct Client {
    pub node: usize,
    pub index: u32,
    pub router: Router,
    pub seed: u64,
    pub stop: Arc<AtomicBool>,
    pub counting: Arc<AtomicBool>,
}

/// Runs a cell: `clients_per_node` threads per node run `client`; a thread
/// keeps the routes of `table` following ownership; after [`WARM_UP`] the
/// clients count for `seconds`; then they stop. The clients' results and
/// the window's length in seconds.
pub fn run_window<T: Send + 'static>(
    nodes: &[NodeAddr],
    table: &Arc<RouteTable>,
    clients_per_node: u32,
    seed: u64,
    seconds: f64,
    client: impl Fn(Client) -> T + Send + Sync + 'static,
) -> Result<(Vec<T>, f64), WindowError> {
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let client = Arc::new(client);
    let mut clients = Vec::with_capacity(nodes.len() * clients_per_node as usize);
    for node in 0..nodes.len() {
        for index in 0..clients_per_node {
            let spec = Client {
                node,
                index,
                router: Router::new(nodes.to_vec(), Arc::clone(table)),
                seed: seed
                    ^ ((node as u64) << 32 | u64::from(index)).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                stop: Arc::clone(&stop),
                counting: Arc::clone(&counting),
            };
            let client = Arc::clone(&client);
            clients.push(std::thread::spawn(move || client(spec)));
        }
    }
    let follower = {
        let stop = Arc::clone(&stop);
        let mut router = Router::new(nodes.to_vec(), Arc::clone(table));
        std::thread::spawn(move || -> Result<(), roost_client::RouteError> {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(FOLLOW_INTERVAL);
                router.follow()?;
            }
            Ok(())
        })
    };
    std::thread::sleep(WARM_UP);
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    counting.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut results = Vec::with_capacity(clients.len());
    for client in clients {
        results.push(client.join().map_err(|_| WindowError::ClientPanicked)?);
    }
    follower.join().map_err(|_| WindowError::ClientPanicked)??;
    Ok((results, elapsed))
}

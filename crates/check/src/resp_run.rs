//! List-append, rw-register and bank against one Roost database spread over
//! a real multi-process cluster (Zeus: ownership and reliable commit, `roost
//! node --protocol ownership`), through RESP with the `redis` crate, while the
//! nemesis strikes. Clients on every node run their transactions as
//! MULTI/EXEC (a bank transfer as WATCH, GET, MULTI/EXEC, as a Redis user
//! writes it); keys hash to the keyspace's reactors, so a transaction's keys
//! are owned by different nodes and move between them. After the run
//! everything is healed, every node reads everything once, and the history
//! is checked for strict serializability: with reads at every replica and
//! SIGKILLed owners this is where a lost acknowledged write or a stale or
//! torn read would show.
//!
//! Outcomes are as honest as a client can be: an answer is `ok`; a WATCH
//! abort (`EXEC` answering nil), an `EXECABORT`, an error that says nothing
//! was applied (`TRYAGAIN`, "transaction aborted, nothing applied"), a
//! transfer refused for want of money or failing before its EXEC, a failed
//! read, or a connection that was never made is `fail`; anything else (an
//! error that leaves the outcome open, a timeout, a dropped connection) is
//! `unknown`, and the client goes on as a new process on a new connection.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{ConnectionLike, Value};
use roost_cluster::local_cluster::{LocalCluster, LocalClusterConfig};
use serde_json::Value as Json;

use crate::cluster_run::ClusterRun;
use crate::history::{MicroOp, Outcome, Recorder, WorkloadKind};
use crate::nemesis::{self, FaultKind, Readiness, ScheduledFault};
use crate::workload::{Generator, WorkloadConfig};

/// A request may take this long before its outcome counts as unknown
/// (ownership moves and reliable commits wait out a killed node's lease).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on waiting for the cluster to form, to settle after healing, and
/// for the final reads.
const SETTLE_PATIENCE: Duration = Duration::from_secs(90);
/// How long a new fault waits for every node to be a live member again and
/// every reactor to have its copies back.
const RECOVERY_PATIENCE: Duration = Duration::from_secs(30);
/// The keyspace's reactors (`roost node`'s default `keyspace_reactors`).
pub const KEYSPACE_REACTORS: usize = 64;
/// The default replication degree (owner plus two readers).
const DEGREE: usize = 3;
/// Process ids of the final reads (one per node), beyond any client's.
const FINAL_PROCESS: u64 = 1 << 40;
/// Keys one transaction of the final read reads (well under the MULTI
/// queue's 10,000 commands, and quick enough for the client's time-out).
const FINAL_READ_KEYS: usize = 500;

#[derive(Debug, Clone)]
pub struct RespRunConfig {
    pub roost_bin: PathBuf,
    pub dir: PathBuf,
    pub nodes: u32,
    /// Client threads per node, each with its own connection.
    pub clients_per_node: u32,
    pub duration_ms: u64,
    pub seed: u64,
    pub faults: Vec<FaultKind>,
    pub fault_interval_ms: u64,
    /// List-append, rw-register or bank.
    pub workload: WorkloadConfig,
    /// More `roost node` arguments for every node (a planted bug).
    pub node_args: Vec<String>,
    /// Membership from a local etcd (the production path) or the nodes'
    /// own peer-to-peer leases (no etcd needed).
    pub etcd: bool,
    /// Faults at fixed times instead of ones drawn from `faults`.
    pub fixed_faults: Option<Vec<ScheduledFault>>,
    /// Told about once a second while the clients run.
    pub progress: Option<ProgressSink>,
}

/// Where a run's progress goes.
#[derive(Clone)]
pub struct ProgressSink(pub Arc<dyn Fn(&RunProgress) + Send + Sync>);

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink")
    }
}

/// A run so far.
#[derive(Debug, Clone)]
pub struct RunProgress {
    /// Since the clients started.
    pub elapsed: Duration,
    pub ok: u64,
    pub failed: u64,
    pub unknown: u64,
    /// Every node's admin endpoint (status, metrics).
    pub admins: Vec<SocketAddr>,
}

/// How often [`RespRunConfig::progress`] is told.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The RESP key of a workload key (or bank account).
fn key_name(kind: WorkloadKind, key: u64) -> String {
    match kind {
        WorkloadKind::ListAppend => format!("la:{key}"),
        WorkloadKind::RwRegister => format!("rw:{key}"),
        _ => format!("account:{key}"),
    }
}

/// Starts the cluster, runs clients and nemesis, heals, reads everything at
/// every node, and returns the history (not yet checked).
pub fn run_cluster_resp(config: &RespRunConfig) -> Result<ClusterRun, String> {
    let kind = config.workload.kind;
    if !matches!(
        kind,
        WorkloadKind::ListAppend | WorkloadKind::RwRegister | WorkloadKind::Bank
    ) {
        return Err(format!(
            "a cluster run over RESP takes list-append, rw-register or bank, not {}",
            kind.name()
        ));
    }
    config.workload.validate()?;
    let mut cluster_config =
        LocalClusterConfig::new(config.roost_bin.clone(), config.dir.clone(), config.nodes);
    cluster_config.protocol = "ownership";
    // Three nodes, their clients and etcd share two cores: a lease a node
    // starved for a moment survives.
    cluster_config.lease_ttl_s = 2;
    cluster_config.extra_args = config.node_args.clone();
    cluster_config.etcd = config.etcd;
    let mut cluster = LocalCluster::start(cluster_config).map_err(|e| e.to_string())?;
    let nodes = config.nodes;
    let ready = move |cluster: &LocalCluster| zeus_ready(cluster, nodes);
    wait_until(
        "the cluster to form and replicate every reactor",
        || ready(&cluster),
        || zeus_unready(&cluster, nodes),
    )?;
    let addrs: Vec<SocketAddr> = (0..nodes)
        .map(|n| cluster.resp_addr(n).expect("a configured node"))
        .collect();
    if kind == WorkloadKind::Bank {
        set_up_accounts(addrs[0], &config.workload)?;
    }

    let generator = Arc::new(Mutex::new(Generator::new(
        config.workload.clone(),
        config.seed,
    )));
    let recorder = Arc::new(Recorder::new());
    let base = recorder.base();
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = base + Duration::from_millis(config.duration_ms);
    let mut clients = Vec::new();
    for node in 0..nodes {
        for c in 0..config.clients_per_node {
            let client = Client {
                addr: addrs[node as usize],
                kind,
                accounts: config.workload.accounts,
                first_process: (u64::from(node) * 64 + u64::from(c)) << 20,
            };
            let recorder = Arc::clone(&recorder);
            let generator = Arc::clone(&generator);
            let stop = Arc::clone(&stop);
            clients.push(std::thread::spawn(move || {
                client.run(&recorder, &generator, deadline, &stop)
            }));
        }
    }
    let progress = config.progress.clone().map(|sink| {
        let (recorder, stop) = (Arc::clone(&recorder), Arc::clone(&stop));
        let admins: Vec<SocketAddr> = (0..nodes).filter_map(|n| cluster.admin_addr(n)).collect();
        std::thread::spawn(move || {
            // Bounded by the clients' stop (set once their time is up).
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(PROGRESS_EVERY);
                let (ok, failed, unknown) = recorder.counts();
                (sink.0)(&RunProgress {
                    elapsed: base.elapsed(),
                    ok,
                    failed,
                    unknown,
                    admins: admins.clone(),
                });
            }
        })
    });
    let campaign = nemesis::Campaign {
        seed: config.seed,
        duration_ms: config.duration_ms,
        fault_interval_ms: config.fault_interval_ms,
        faults: &config.faults,
        fixed: config.fixed_faults.as_deref(),
    };
    let readiness = Readiness {
        ready: &ready,
        patience: RECOVERY_PATIENCE,
    };
    let (faults, mut heal_errors) =
        nemesis::run_beside_clients(&mut cluster, &campaign, base, &stop, &readiness, clients);
    if let Some(progress) = progress {
        let _ = progress.join();
    }
    if let Err(e) = wait_until(
        "the cluster to settle after healing",
        || ready(&cluster),
        || zeus_unready(&cluster, nodes),
    ) {
        // The final reads say whether anything is missing; this only
        // explains a slow one.
        heal_errors.push(e);
    }
    let final_ops = generator.lock().expect("no client panicked").final_read();
    for node in 0..nodes {
        let client = Client {
            addr: addrs[node as usize],
            kind,
            accounts: config.workload.accounts,
            first_process: FINAL_PROCESS + u64::from(node),
        };
        let mut process = client.first_process;
        // In chunks: a long run's keys are more than one MULTI may queue.
        for chunk in final_ops.chunks(FINAL_READ_KEYS) {
            final_read(&client, &mut process, &recorder, chunk)?;
        }
    }
    let recorder = Arc::try_unwrap(recorder).map_err(|_| "a client still holds the recorder")?;
    Ok(ClusterRun {
        history: recorder.into_history(config.workload.meta()),
        faults,
        heal_errors,
    })
}

/// Waits until `done`; on timing out, says what `why` finds missing.
fn wait_until(
    what: &str,
    mut done: impl FnMut() -> bool,
    why: impl FnOnce() -> Option<String>,
) -> Result<(), String> {
    let deadline = Instant::now() + SETTLE_PATIENCE;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!(
                "timed out after {} s waiting for {what}{}",
                SETTLE_PATIENCE.as_secs(),
                why().map_or(String::new(), |w| format!(" ({w})"))
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Every node is serving with every node a member, answers PING on RESP,
/// and every keyspace reactor has an owner and its readers (the degree,
/// capped by the nodes).
pub fn zeus_ready(cluster: &LocalCluster, nodes: u32) -> bool {
    zeus_unready(cluster, nodes).is_none()
}

/// What keeps the cluster from being ready (`None`: nothing).
pub fn zeus_unready(cluster: &LocalCluster, nodes: u32) -> Option<String> {
    for node in 0..nodes {
        match cluster.status(node) {
            None => return Some(format!("node {node} does not answer /status")),
            Some(s) if !s.serving => return Some(format!("node {node} is not serving")),
            Some(s) if s.members.len() != nodes as usize => {
                return Some(format!(
                    "node {node} sees {} members, not {nodes}",
                    s.members.len()
                ))
            }
            Some(_) => {}
        }
    }
    for node in 0..nodes {
        let pong = cluster
            .resp_addr(node)
            .and_then(connect)
            .is_some_and(|mut con| redis::cmd("PING").query::<String>(&mut con).is_ok());
        if !pong {
            return Some(format!("node {node} does not answer PING"));
        }
    }
    let readers = DEGREE.min(nodes as usize) - 1;
    for i in 0..KEYSPACE_REACTORS {
        let key = format!("keyspace/keyspace-{i}");
        let most = (0..nodes)
            .filter_map(|node| owner_readers(cluster, node, &key))
            .max();
        match most {
            None => {
                let seen: Vec<String> = (0..nodes)
                    .map(|node| {
                        let path = format!("/ownership/describe?key={key}");
                        match cluster.admin(node, &path, Duration::from_secs(2)) {
                            Ok((code, body)) => format!("node {node}: {code} {body}"),
                            Err(e) => format!("node {node}: {e}"),
                        }
                    })
                    .collect();
                return Some(format!("no node owns {key}: {}", seen.join("; ")));
            }
            Some(r) if r < readers => return Some(format!("{key} has {r} readers, not {readers}")),
            Some(_) => {}
        }
    }
    None
}

/// How many readers `node` says `reactor` has, if it is its valid owner.
fn owner_readers(cluster: &LocalCluster, node: u32, reactor: &str) -> Option<usize> {
    let path = format!("/ownership/describe?key={reactor}");
    let (code, body) = cluster.admin(node, &path, Duration::from_secs(2)).ok()?;
    if code != 200 {
        return None;
    }
    let json: Json = serde_json::from_str(&body).ok()?;
    let described = json.get("Described")?;
    if described.get("access")?.as_str()? != "Owner" {
        return None;
    }
    Some(
        described
            .get("meta")?
            .get("o_replicas")?
            .get("readers")?
            .as_array()?
            .len(),
    )
}

fn connect(addr: SocketAddr) -> Option<redis::Connection> {
    let client = redis::Client::open(format!("redis://{addr}/")).ok()?;
    let con = client.get_connection_with_timeout(CONNECT_TIMEOUT).ok()?;
    con.set_read_timeout(Some(CLIENT_TIMEOUT)).ok()?;
    con.set_write_timeout(Some(CLIENT_TIMEOUT)).ok()?;
    Some(con)
}

/// Every account starts with the workload's initial balance (one MSET,
/// before any client runs; the checker's bank total assumes it).
fn set_up_accounts(addr: SocketAddr, workload: &WorkloadConfig) -> Result<(), String> {
    let mut mset = redis::cmd("MSET");
    for account in 0..workload.accounts {
        mset.arg(key_name(WorkloadKind::Bank, account))
            .arg(workload.initial_balance);
    }
    wait_until(
        "the accounts to be set up",
        || connect(addr).is_some_and(|mut con| mset.query::<()>(&mut con).is_ok()),
        || None,
    )
}

/// What one transaction came to.
enum Answer {
    /// Committed: the values of its commands.
    Done(Vec<Value>),
    /// Surely not applied (a WATCH abort, EXECABORT, refused for want of
    /// money).
    Refused,
    /// May or may not have been applied.
    Unknown,
}

/// One client thread: its node's address and the workload it runs.
struct Client {
    addr: SocketAddr,
    kind: WorkloadKind,
    accounts: u64,
    first_process: u64,
}

impl Client {
    fn run(
        &self,
        recorder: &Recorder,
        generator: &Mutex<Generator>,
        deadline: Instant,
        stop: &AtomicBool,
    ) {
        let mut process = self.first_process;
        let mut con: Option<redis::Connection> = None;
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            let Some(c) = con.as_mut() else {
                // Not connected (the node is down or paused): nothing is
                // invoked until a connection is made.
                con = connect(self.addr);
                if con.is_none() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            };
            let ops = generator.lock().expect("no client panicked").next_txn();
            let invocation = recorder.invoke(process);
            let (outcome, ops) = self.transaction(c, ops);
            recorder.complete(invocation, outcome, ops);
            if outcome == Outcome::Unknown {
                // The process may still be in flight: retire it (as in
                // Jepsen) and start over on a new connection.
                process += 1;
                con = None;
            } else if !c.is_open() {
                con = None;
            } else if outcome == Outcome::Fail {
                // A WATCH abort, a refused transfer, a reactor that could
                // not be brought here: the connection is fine.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    /// Runs `ops` as one transaction; returns the outcome and the ops with
    /// what the reads saw.
    fn transaction(
        &self,
        con: &mut redis::Connection,
        ops: Vec<MicroOp>,
    ) -> (Outcome, Vec<MicroOp>) {
        let answer = match (self.kind, ops.as_slice()) {
            (WorkloadKind::Bank, [MicroOp::Transfer { from, to, amount }]) => {
                self.transfer(con, *from, *to, *amount)
            }
            (WorkloadKind::Bank, [MicroOp::ReadBank { .. }]) => {
                let mut mget = redis::cmd("MGET");
                for account in 0..self.accounts {
                    mget.arg(key_name(WorkloadKind::Bank, account));
                }
                match mget.query::<Value>(con) {
                    Ok(value) => Answer::Done(vec![value]),
                    // A read that failed changed nothing.
                    Err(_) => Answer::Refused,
                }
            }
            _ => {
                let commands: Vec<redis::Cmd> = ops.iter().map(|op| self.command(op)).collect();
                multi_exec(con, commands)
            }
        };
        match answer {
            Answer::Done(values) => match self.fill(ops.clone(), &values) {
                Some(filled) => (Outcome::Ok, filled),
                // Committed, but an answer we cannot read: say nothing of it.
                None => (Outcome::Unknown, ops),
            },
            Answer::Refused => (Outcome::Fail, ops),
            Answer::Unknown => (Outcome::Unknown, ops),
        }
    }

    /// The RESP command of a list-append or rw-register micro-op.
    fn command(&self, op: &MicroOp) -> redis::Cmd {
        let mut cmd;
        match op {
            MicroOp::Append { key, value } => {
                cmd = redis::cmd("RPUSH");
                cmd.arg(key_name(self.kind, *key)).arg(*value);
            }
            MicroOp::Read { key, .. } => {
                cmd = redis::cmd("LRANGE");
                cmd.arg(key_name(self.kind, *key)).arg(0).arg(-1);
            }
            MicroOp::Write { key, value } => {
                cmd = redis::cmd("SET");
                cmd.arg(key_name(self.kind, *key)).arg(*value);
            }
            MicroOp::ReadReg { key, .. } => {
                cmd = redis::cmd("GET");
                cmd.arg(key_name(self.kind, *key));
            }
            other => unreachable!("not a keyed micro-op: {other:?}"),
        }
        cmd
    }

    /// A transfer as a Redis user writes it: WATCH the payer, read its
    /// balance, refuse an overdraft, else MULTI/DECRBY/INCRBY/EXEC (nil: the
    /// balance changed meanwhile, nothing applied).
    fn transfer(&self, con: &mut redis::Connection, from: u64, to: u64, amount: i64) -> Answer {
        let from_key = key_name(WorkloadKind::Bank, from);
        let to_key = key_name(WorkloadKind::Bank, to);
        // Nothing is written before the EXEC: a failure before it is a
        // transfer that did not happen.
        if redis::cmd("WATCH").arg(&from_key).query::<()>(con).is_err() {
            return Answer::Refused;
        }
        let balance = match redis::cmd("GET").arg(&from_key).query::<Option<i64>>(con) {
            Ok(Some(balance)) => balance,
            _ => {
                let _ = redis::cmd("UNWATCH").query::<()>(con);
                return Answer::Refused;
            }
        };
        if balance < amount {
            let _ = redis::cmd("UNWATCH").query::<()>(con);
            return Answer::Refused;
        }
        let mut decr = redis::cmd("DECRBY");
        decr.arg(&from_key).arg(amount);
        let mut incr = redis::cmd("INCRBY");
        incr.arg(&to_key).arg(amount);
        match multi_exec(con, vec![decr, incr]) {
            // One value for the one micro-op.
            Answer::Done(_) => Answer::Done(vec![Value::Okay]),
            other => other,
        }
    }

    /// The ops with the values their reads returned (`None`: an answer of
    /// the wrong shape).
    fn fill(&self, ops: Vec<MicroOp>, values: &[Value]) -> Option<Vec<MicroOp>> {
        if values.len() != ops.len() {
            return None;
        }
        ops.into_iter()
            .zip(values)
            .map(|(op, value)| {
                Some(match op {
                    MicroOp::Read { key, .. } => MicroOp::Read {
                        key,
                        value: Some(list(value)?),
                    },
                    MicroOp::ReadReg { key, .. } => MicroOp::ReadReg {
                        key,
                        value: match value {
                            Value::Nil => None,
                            other => Some(number(other)?),
                        },
                    },
                    MicroOp::ReadBank { .. } => {
                        let Value::Array(items) = value else {
                            return None;
                        };
                        let balances = items.iter().map(signed).collect::<Option<Vec<i64>>>()?;
                        MicroOp::ReadBank {
                            balances: Some(balances),
                        }
                    }
                    MicroOp::Transfer { .. } | MicroOp::Append { .. } | MicroOp::Write { .. } => {
                        if matches!(value, Value::ServerError(_)) {
                            return None;
                        }
                        op
                    }
                    _ => return None,
                })
            })
            .collect()
    }
}

/// `cmds` as one MULTI/EXEC, sent in one write (MULTI, the commands, EXEC)
/// and read back as they came, so an error answer is seen for what it is.
fn multi_exec(con: &mut redis::Connection, cmds: Vec<redis::Cmd>) -> Answer {
    let len = cmds.len();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.add_command(redis::cmd("MULTI"));
    for cmd in cmds {
        pipe.add_command(cmd);
    }
    pipe.add_command(redis::cmd("EXEC"));
    let replies = match pipe.query::<Vec<Value>>(con) {
        Ok(replies) if replies.len() == len + 2 => replies,
        // A broken connection or a reply we cannot read.
        _ => return Answer::Unknown,
    };
    match &replies[len + 1] {
        // A watched key changed: nothing applied.
        Value::Nil => Answer::Refused,
        Value::Array(items)
            if items.len() == len && !items.iter().any(|v| matches!(v, Value::ServerError(_))) =>
        {
            Answer::Done(items.clone())
        }
        // A command refused while queueing, or a transaction the node says
        // applied nothing (it could not bring a key here, it conflicted):
        // nothing applied.
        Value::ServerError(e) if applied_nothing(e) => Answer::Refused,
        other => {
            if std::env::var_os("ROOST_CHECK_DEBUG").is_some() {
                eprintln!("unknown outcome: EXEC answered {other:?}");
            }
            Answer::Unknown
        }
    }
}

/// Whether an error answer says its transaction applied nothing (Roost's
/// words for it, Redis's EXECABORT and TRYAGAIN).
fn applied_nothing(error: &redis::ServerError) -> bool {
    matches!(error.code(), "EXECABORT" | "TRYAGAIN")
        || error
            .details()
            .is_some_and(|d| d.starts_with("transaction aborted, nothing applied"))
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

fn number(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => text(other)?.parse().ok(),
    }
}

fn signed(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => text(other)?.parse().ok(),
    }
}

fn list(value: &Value) -> Option<Vec<u64>> {
    match value {
        Value::Array(items) => items.iter().map(number).collect(),
        _ => None,
    }
}

/// One chunk of the final read at one node, repeated until it is answered
/// (`process`: the reading process, a new one after an unknown outcome).
fn final_read(
    client: &Client,
    process: &mut u64,
    recorder: &Recorder,
    ops: &[MicroOp],
) -> Result<(), String> {
    let deadline = Instant::now() + SETTLE_PATIENCE;
    loop {
        if let Some(mut con) = connect(client.addr) {
            let invocation = recorder.invoke(*process);
            let (outcome, ops) = client.transaction(&mut con, ops.to_vec());
            recorder.complete(invocation, outcome, ops);
            match outcome {
                Outcome::Ok => return Ok(()),
                Outcome::Unknown => *process += FINAL_PROCESS,
                Outcome::Fail => {}
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the final read at {} was not answered within {} s",
                client.addr,
                SETTLE_PATIENCE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

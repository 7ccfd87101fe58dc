//! Sites that are clusters (issue 17 item 6): `roost up --sites 3
//! --nodes-per-site 3` runs three Roost clusters of three `roost node`
//! processes, each cluster one site of a geo-replicated deployment. A
//! site's bounded counters are rows of its cluster's keyspace, replicated to
//! its nodes by reliable commit, and BC.* work on any node of the site.
//!
//! Nine clients, one per node, decrement one counter with GLOBAL until the
//! bound answers; one node of site 1 is killed with SIGKILL early on (its
//! client moves to another node of the site, as a client with the site's
//! addresses does). The bound holds (never more decrements acknowledged
//! than the counter held), no right is lost (every unit is used: the
//! acknowledged decrements and those in flight at the kill add up to all of
//! it, and every surviving node reads 0), and site 1 keeps serving.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SITES: u16 = 3;
const PER_SITE: u16 = 3;
const NODES: u16 = SITES * PER_SITE;
/// The counter's value, all of it first at site 0.
const STOCK: u64 = 900;
/// The site one of whose nodes is killed (each of them in turn, one per
/// counter, so one of them owns the counter's row when it dies).
const VICTIM_SITE: u16 = 1;
/// How long the clients may take to use the whole counter.
const RUN_PATIENCE: Duration = Duration::from_secs(120);
/// Starting etcd and nine nodes on a loaded 2-core machine.
const START_PATIENCE: Duration = Duration::from_secs(90);

/// `n` consecutive free ports.
fn free_run(n: u16) -> u16 {
    for _ in 0..100 {
        let first = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(0);
        if first > 1024
            && first < 60000
            && (0..n).all(|i| TcpListener::bind(("127.0.0.1", first + i)).is_ok())
        {
            return first;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// `roost up`, stopped (SIGTERM, then SIGKILL) when dropped.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one BC.* call came to.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Ok,
    Int(i64),
    Error(String),
    Array(Vec<Reply>),
    Other(String),
}

struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(port: u16) -> std::io::Result<Client> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(Duration::from_secs(15)))?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// `Err`: the connection failed (the outcome of the call is unknown).
    fn call(&mut self, args: &[&str]) -> std::io::Result<Reply> {
        let mut wire = format!("*{}\r\n", args.len());
        for a in args {
            wire.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.writer.write_all(wire.as_bytes())?;
        self.read_reply()
    }

    fn read_reply(&mut self) -> std::io::Result<Reply> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        Ok(match line.as_bytes().first() {
            Some(b'+') if line == "+OK" => Reply::Ok,
            Some(b':') => Reply::Int(line[1..].parse().unwrap_or(i64::MIN)),
            Some(b'-') => Reply::Error(line[1..].to_owned()),
            Some(b'*') => {
                let n: usize = line[1..].parse().unwrap_or(0);
                Reply::Array(
                    (0..n)
                        .map(|_| self.read_reply())
                        .collect::<Result<_, _>>()?,
                )
            }
            _ => Reply::Other(line.to_owned()),
        })
    }
}

/// `args` at `port` until `done` holds of the reply (a fresh connection
/// each try, so a node still starting is waited for).
fn wait_for(port: u16, args: &[&str], done: impl Fn(&Reply) -> bool, what: &str) {
    let deadline = Instant::now() + START_PATIENCE;
    let mut last = None;
    while Instant::now() < deadline {
        if let Ok(mut client) = Client::connect(port) {
            match client.call(args) {
                Ok(reply) if done(&reply) => return,
                Ok(reply) => last = Some(reply),
                Err(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what} at port {port}: last reply {last:?}");
}

/// The pid of the `roost node` process serving RESP on `port`.
fn node_pid(port: u16) -> Option<i32> {
    let wanted = [
        "node".to_owned(),
        "--resp-port".to_owned(),
        port.to_string(),
    ];
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let has = |i: usize| args.get(i) == Some(&wanted[2]) && args[i - 1] == wanted[1];
        if args.get(1) == Some(&wanted[0]) && (2..args.len()).any(has) {
            return Some(pid);
        }
    }
    None
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    acknowledged: AtomicU64,
    /// Calls whose connection failed before the reply: done or not.
    unknown: AtomicU64,
    /// Decrements the victim's site acknowledged after the kill.
    victim_site_after_kill: AtomicU64,
    errors: AtomicU64,
    retries: AtomicU64,
    /// A decrement answered with a value below the bound.
    below_bound: AtomicU64,
}

/// Client `g` (node `g`'s, site `g / PER_SITE`): BC.DEC stock 1 GLOBAL until
/// BOUND; a failed connection moves it to the next node of its site.
/// Returns whether it ended on BOUND.
fn client(
    g: u16,
    resp_base: u16,
    key: &str,
    tally: &Tally,
    killed: &AtomicBool,
    deadline: Instant,
) -> bool {
    let site = g / PER_SITE;
    let mut member = g % PER_SITE;
    let mut connection: Option<Client> = None;
    while Instant::now() < deadline {
        let port = resp_base + site * PER_SITE + member;
        let client = match &mut connection {
            Some(client) => client,
            None => match Client::connect(port) {
                Ok(client) => connection.insert(client),
                Err(_) => {
                    member = (member + 1) % PER_SITE;
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            },
        };
        match client.call(&["BC.DEC", key, "1", "GLOBAL"]) {
            Ok(Reply::Int(value)) => {
                tally.acknowledged.fetch_add(1, Ordering::SeqCst);
                if value < 0 {
                    tally.below_bound.fetch_add(1, Ordering::SeqCst);
                }
                if site == VICTIM_SITE && killed.load(Ordering::SeqCst) {
                    tally.victim_site_after_kill.fetch_add(1, Ordering::SeqCst);
                }
            }
            Ok(Reply::Error(e)) if e.starts_with("BOUND") => return true,
            Ok(Reply::Error(e)) if e.starts_with("RETRY") => {
                tally.retries.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(_) => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => {
                tally.unknown.fetch_add(1, Ordering::SeqCst);
                connection = None;
                member = (member + 1) % PER_SITE;
            }
        }
    }
    false
}

fn scratch() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "roost-site-clusters-{}-{nanos}",
        std::process::id()
    ))
}

fn start(dir: &Path, base: u16) -> Up {
    std::fs::create_dir_all(dir).unwrap();
    let port = |offset: u16| (base + offset).to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_roost"))
        .args(["up", "--sites", &SITES.to_string()])
        .args(["--nodes-per-site", &PER_SITE.to_string()])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--site-resp-port", &port(0)])
        .args(["--site-port", &port(NODES)])
        .args(["--site-cluster-port", &port(2 * NODES)])
        .args(["--site-admin-port", &port(3 * NODES)])
        .args(["--etcd-port", &port(4 * NODES)])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("up.stderr")).unwrap())
        .spawn()
        .expect("roost up starts");
    Up(child)
}

/// One counter of [`STOCK`], used up by a client per node while node
/// `victim` of site [`VICTIM_SITE`] is killed.
fn use_up_through_a_kill(base: u16, key: &str, victim: u16) {
    // Until the site's reactors exist (a node answers PING before its
    // cluster created them); a try that created it and failed to say so
    // leaves it existing.
    wait_for(
        base,
        &["BC.CREATE", key, "LOWER", "0", &STOCK.to_string()],
        |r| *r == Reply::Ok || matches!(r, Reply::Error(e) if e.contains("already exists")),
        "BC.CREATE",
    );
    for g in 0..NODES {
        wait_for(
            base + g,
            &["BC.GET", key],
            |r| *r == Reply::Int(STOCK as i64),
            "the counter reaching every node",
        );
    }
    let tally = Arc::new(Tally::default());
    let killed = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + RUN_PATIENCE;
    let clients: Vec<_> = (0..NODES)
        .map(|g| {
            let (tally, killed, key) = (Arc::clone(&tally), Arc::clone(&killed), key.to_owned());
            std::thread::spawn(move || client(g, base, &key, &tally, &killed, deadline))
        })
        .collect();
    // Early on, while every site still has plenty to spend.
    let early = Instant::now() + Duration::from_secs(20);
    while tally.acknowledged.load(Ordering::SeqCst) < STOCK / 8 && Instant::now() < early {
        std::thread::sleep(Duration::from_millis(5));
    }
    let victim_port = base + VICTIM_SITE * PER_SITE + victim;
    let pid = node_pid(victim_port).expect("the victim's roost node process");
    // SAFETY: kill(2) on a process this test's roost up started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    killed.store(true, Ordering::SeqCst);
    let acknowledged_at_kill = tally.acknowledged.load(Ordering::SeqCst);
    let ended_on_bound: Vec<bool> = clients.into_iter().map(|c| c.join().unwrap()).collect();

    let acknowledged = tally.acknowledged.load(Ordering::SeqCst);
    let unknown = tally.unknown.load(Ordering::SeqCst);
    eprintln!(
        "site clusters, {key}, node {victim} of site {VICTIM_SITE} killed: {acknowledged} \
         decrements acknowledged of {STOCK} ({acknowledged_at_kill} before the kill, {} by site \
         {VICTIM_SITE} after it), {unknown} in flight on a cut connection, {} RETRY, {} errors",
        tally.victim_site_after_kill.load(Ordering::SeqCst),
        tally.retries.load(Ordering::Relaxed),
        tally.errors.load(Ordering::Relaxed),
    );
    assert!(
        ended_on_bound.iter().all(|&b| b),
        "every client ends on BOUND (the counter used up), not on the deadline: {ended_on_bound:?}"
    );
    assert!(
        acknowledged <= STOCK,
        "the bound holds: {acknowledged} > {STOCK}"
    );
    assert_eq!(
        tally.below_bound.load(Ordering::SeqCst),
        0,
        "a value below the bound"
    );
    assert!(
        acknowledged + unknown >= STOCK,
        "no right is lost: {acknowledged} acknowledged + {unknown} unknown < {STOCK}"
    );
    assert!(
        tally.victim_site_after_kill.load(Ordering::SeqCst) > 0,
        "site {VICTIM_SITE} kept serving after losing a node"
    );
    for g in (0..NODES).filter(|&g| g != VICTIM_SITE * PER_SITE + victim) {
        wait_for(
            base + g,
            &["BC.GET", key],
            |r| *r == Reply::Int(0),
            "every surviving node reading the counter used up",
        );
    }
    // roost up restarts the victim; it rejoins its site and reads the
    // counter as the others do.
    wait_for(
        victim_port,
        &["BC.GET", key],
        |r| *r == Reply::Int(0),
        "the restarted node reading the counter used up",
    );
}

#[test]
fn a_site_of_three_nodes_keeps_its_rights_and_serves_through_a_sigkill() {
    common::require_etcd();
    let dir = scratch();
    let base = free_run(4 * NODES + 2);
    let _up = start(&dir, base);
    for g in 0..NODES {
        wait_for(
            base + g,
            &["PING"],
            |r| *r == Reply::Other("+PONG".into()),
            "PING",
        );
    }
    for victim in 0..PER_SITE {
        use_up_through_a_kill(base, &format!("stock{victim}"), victim);
    }
    // Procedures reach the site's rows from any of its nodes: FCALL reserve
    // (both counters or neither, strictly local) at each node of site 0,
    // which holds the rights, and every node of every site learns it.
    for key in ["a", "b"] {
        wait_for(
            base,
            &["BC.CREATE", key, "LOWER", "0", "10"],
            |r| *r == Reply::Ok,
            "BC.CREATE",
        );
    }
    for member in 0..PER_SITE {
        let left = i64::from(10 - member - 1);
        wait_for(
            base + member,
            &["FCALL", "reserve", "2", "a", "b", "1"],
            |r| *r == Reply::Array(vec![Reply::Int(left), Reply::Int(left)]),
            "FCALL reserve",
        );
    }
    let left = i64::from(10 - PER_SITE);
    for g in 0..NODES {
        for key in ["a", "b"] {
            wait_for(
                base + g,
                &["BC.GET", key],
                |r| *r == Reply::Int(left),
                "the procedures' decrements",
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

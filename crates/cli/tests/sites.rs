//! Sites of a geo-replicated deployment as `roost resp --site` processes
//! (each an escrow site with its bounded counters inside Roost), driven over
//! RESP with BC.*: concurrent decrements at every site never pass the bound
//! and use every right; a site killed with SIGKILL keeps its rights from the
//! others, who answer RETRY rather than BOUND and still agree on the value,
//! until `roost sites recover` declares it permanently failed (§IV-E): then
//! its heir takes its rights over and the bound is reached exactly, once.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `n` distinct free ports (all held until all are chosen).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// One deployment at a time: the tests' ports cannot collide.
static EXCLUSIVE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A RESP reply, as much of it as these tests read.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Ok,
    Int(i64),
    Nil,
    Error(String),
    Array(Vec<Reply>),
    Other(String),
}

struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(port: u16) -> Client {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(stream) => {
                    stream
                        .set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    return Client {
                        reader: BufReader::new(stream.try_clone().unwrap()),
                        writer: stream,
                    };
                }
                Err(e) if Instant::now() > deadline => panic!("connecting to {port}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn call(&mut self, args: &[&str]) -> Reply {
        let mut wire = format!("*{}\r\n", args.len());
        for a in args {
            wire.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.writer.write_all(wire.as_bytes()).unwrap();
        self.read_reply()
    }

    fn read_reply(&mut self) -> Reply {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        match line.as_bytes().first() {
            Some(b'+') if line == "+OK" => Reply::Ok,
            Some(b':') => Reply::Int(line[1..].parse().unwrap()),
            Some(b'-') => Reply::Error(line[1..].to_owned()),
            Some(b'$') if line == "$-1" => Reply::Nil,
            Some(b'_') => Reply::Nil,
            Some(b'*') => {
                let n: usize = line[1..].parse().unwrap();
                Reply::Array((0..n).map(|_| self.read_reply()).collect())
            }
            _ => Reply::Other(line.to_owned()),
        }
    }
}

/// `n` site processes; killed when dropped.
struct Sites {
    children: Vec<Option<Child>>,
    resp_ports: Vec<u16>,
    secret_file: std::path::PathBuf,
}

/// A fresh deployment secret (32 random bytes in hex), in a file of its own.
fn secret_file() -> std::path::PathBuf {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let path =
        std::env::temp_dir().join(format!("roost-sites-{}-{nanos}.secret", std::process::id()));
    let hex: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    std::fs::write(&path, hex).expect("write the secret file");
    path
}

impl Sites {
    fn start(n: usize) -> Sites {
        Sites::start_with(n, &[])
    }

    /// `n` sites, each `roost resp` given `extra` arguments too.
    fn start_with(n: usize, extra: &[&str]) -> Sites {
        let ports = free_ports(2 * n);
        let site_addrs: Vec<SocketAddr> = ports[..n]
            .iter()
            .map(|&port| SocketAddr::from(([127, 0, 0, 1], port)))
            .collect();
        let peers = site_addrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let resp_ports = ports[n..].to_vec();
        let secret_file = secret_file();
        let children = (0..n)
            .map(|i| {
                Some(
                    Command::new(env!("CARGO_BIN_EXE_roost"))
                        .args(["resp", "--port", &resp_ports[i].to_string()])
                        .args(["--site", &i.to_string(), "--site-peers", &peers])
                        .arg("--secret-file")
                        .arg(&secret_file)
                        .args(extra)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .expect("roost resp starts"),
                )
            })
            .collect();
        Sites {
            children,
            resp_ports,
            secret_file,
        }
    }

    fn client(&self, site: usize) -> Client {
        Client::connect(self.resp_ports[site])
    }

    fn sigkill(&mut self, site: usize) {
        if let Some(mut child) = self.children[site].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits until every live site in `live` reads `key` as one value (and
    /// `expected`, if given); returns it.
    fn converged(&self, key: &str, live: &[usize], expected: Option<i64>) -> i64 {
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut clients: Vec<Client> = live.iter().map(|&s| self.client(s)).collect();
        let mut last = Vec::new();
        while Instant::now() < deadline {
            last = clients
                .iter_mut()
                .map(|c| c.call(&["BC.GET", key]))
                .collect::<Vec<_>>();
            if let Reply::Int(v) = last[0] {
                if last.iter().all(|r| *r == last[0]) && expected.is_none_or(|e| e == v) {
                    return v;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("sites {live:?} did not converge on {key}: {last:?}");
    }
}

impl Drop for Sites {
    fn drop(&mut self) {
        for site in 0..self.children.len() {
            self.sigkill(site);
        }
        let _ = std::fs::remove_file(&self.secret_file);
    }
}

/// Decrements `key` by 1 at `site` until the bound is reached (BOUND), or,
/// with `give_up_after`, until only RETRY came back for that long; RETRY is
/// retried after 5 ms. Returns the successes and the last refusal.
fn drain(
    port: u16,
    key: &str,
    deadline: Instant,
    give_up_after: Option<Duration>,
) -> (u64, Option<String>) {
    let mut client = Client::connect(port);
    let mut ok = 0;
    let mut last_ok = Instant::now();
    while Instant::now() < deadline {
        match client.call(&["BC.DEC", key, "1", "GLOBAL"]) {
            Reply::Int(_) => {
                ok += 1;
                last_ok = Instant::now();
            }
            Reply::Error(e) if e.starts_with("BOUND") => return (ok, Some(e)),
            Reply::Error(e) if e.starts_with("RETRY") => {
                if give_up_after.is_some_and(|patience| last_ok.elapsed() > patience) {
                    return (ok, Some(e));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            other => panic!("BC.DEC: {other:?}"),
        }
    }
    (ok, None)
}

#[test]
fn sites_never_pass_the_bound_and_use_every_right() {
    const START: u64 = 300;
    let _one = exclusive();
    let sites = Sites::start(3);
    let mut c0 = sites.client(0);
    assert_eq!(
        c0.call(&["BC.CREATE", "stock", "LOWER", "0", &START.to_string()]),
        Reply::Ok
    );
    assert_eq!(
        c0.call(&["BC.CREATE", "stock", "LOWER", "0", "5"]),
        Reply::Error("ERR key already exists".into())
    );
    assert_eq!(
        c0.call(&["BC.CREATE", "bad", "LOWER", "10", "5"]),
        Reply::Error("ERR the initial value 5 is beyond the bound 10".into())
    );
    sites.converged("stock", &[0, 1, 2], Some(START as i64));
    // Bad recovery requests are clear errors and change nothing.
    for (args, needle) in [
        (&["BC.FENCE", "0"][..], "cannot be declared failed"),
        (&["BC.FENCE", "7"], "cannot be declared failed"),
        (&["BC.FENCE", "-1"], "non-negative integer"),
        (&["BC.ADOPT", "2", "stock", "garbage"], "not a report"),
        (
            &["BC.ADOPT", "2", "stock", r#"{"version":9,"report":{}}"#],
            "not a report",
        ),
    ] {
        match c0.call(args) {
            Reply::Error(e) => assert!(e.contains(needle), "{args:?}: {e}"),
            other => panic!("{args:?}: {other:?}"),
        }
    }
    // Inside MULTI a site's counter command is refused (it runs at once).
    assert_eq!(c0.call(&["MULTI"]), Reply::Ok);
    assert!(matches!(c0.call(&["BC.DEC", "stock", "1"]), Reply::Error(e) if e.contains("MULTI")));
    assert!(matches!(c0.call(&["EXEC"]), Reply::Error(e) if e.starts_with("EXECABORT")));

    let ok = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(30);
    let threads: Vec<_> = (0..9)
        .map(|t| {
            let (port, ok) = (sites.resp_ports[t % 3], Arc::clone(&ok));
            std::thread::spawn(move || {
                let (n, _) = drain(port, "stock", deadline, None);
                ok.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let ok = ok.load(Ordering::Relaxed);
    assert!(ok <= START, "{ok} decrements passed the bound of {START}");
    assert_eq!(ok, START, "every right was used");
    assert_eq!(sites.converged("stock", &[0, 1, 2], Some(0)), 0);
    assert!(matches!(
        c0.call(&["BC.DEC", "stock", "1", "LOCAL"]),
        Reply::Error(e) if e.starts_with("BOUND")
    ));
}

#[test]
fn a_killed_site_keeps_its_rights_until_declared_failed() {
    const START: u64 = 300;
    let _one = exclusive();
    let mut sites = Sites::start(3);
    let mut c0 = sites.client(0);
    assert_eq!(
        c0.call(&["BC.CREATE", "seats", "LOWER", "0", &START.to_string()]),
        Reply::Ok
    );
    sites.converged("seats", &[0, 1, 2], Some(START as i64));
    // Site 2 takes rights (global decrements ask for them) and uses some.
    let mut c2 = sites.client(2);
    let mut spent_at_2 = 0;
    for _ in 0..20 {
        if let Reply::Int(_) = c2.call(&["BC.DEC", "seats", "1", "GLOBAL"]) {
            spent_at_2 += 1;
        }
    }
    assert!(spent_at_2 > 0);
    // Let site 2's state reach the others, then kill it.
    std::thread::sleep(Duration::from_millis(500));
    sites.sigkill(2);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut ok = 0;
    let mut refusals = Vec::new();
    for site in [0, 1] {
        let (n, why) = drain(
            sites.resp_ports[site],
            "seats",
            deadline,
            Some(Duration::from_secs(1)),
        );
        ok += n;
        refusals.push(why.expect("rights ran out before the deadline"));
    }
    let total = ok + spent_at_2;
    println!("site 2 spent {spent_at_2}, sites 0 and 1 {ok}; refusals {refusals:?}");
    assert!(total <= START, "{total} decrements passed the bound");
    assert!(
        total < START,
        "site 2 held rights when it died: the others cannot use them"
    );
    assert!(
        refusals.iter().all(|e| e.starts_with("RETRY")),
        "site 2's rights still exist: RETRY, never BOUND: {refusals:?}"
    );
    let left = sites.converged("seats", &[0, 1], None);
    assert_eq!(left, (START - total) as i64);

    // §IV-E: the operator declares site 2 permanently failed, site 0 its heir.
    let resp = sites
        .resp_ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let recover = || {
        let out = Command::new(env!("CARGO_BIN_EXE_roost"))
            .args(["sites", "recover", "--failed", "2", "--heir", "0"])
            .args(["--resp", &resp])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "roost sites recover failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let first = recover();
    println!("{first}");
    assert!(
        first.contains(&format!("recovered {} rights", START - total)),
        "{first}"
    );
    // Its rights are usable again: together exactly the bound is reached.
    let mut after = 0;
    for site in [0, 1] {
        let (n, why) = drain(sites.resp_ports[site], "seats", deadline, None);
        after += n;
        assert!(
            why.as_deref().is_some_and(|e| e.starts_with("BOUND")),
            "site {site}: {why:?}"
        );
    }
    assert_eq!(total + after, START, "every right was used once");
    assert_eq!(sites.converged("seats", &[0, 1], Some(0)), 0);
    // A second recovery finds nothing left.
    assert!(recover().contains("recovered 0 rights"));
}

/// What a run of [`shared_rights_workload`] came to.
#[derive(Debug)]
struct SharedRun {
    /// Successful decrements of `a` and of `b` (BC.DEC and FCALL together).
    ok: [u64; 2],
    /// Successful `FCALL reserve 2 a b 1` calls.
    reserved: u64,
    /// The values every site agrees on at the end.
    converged: [i64; 2],
}

/// Counters `a` and `b` (lower bound 0, `start` each) at 3 sites; at every
/// site one client decrements `a` with BC.DEC GLOBAL, one `b`, and one
/// calls `FCALL reserve 2 a b 1` (a procedure: both or neither, strictly
/// local) until the rights run out.
fn shared_rights_workload(sites: &Sites, start: u64) -> SharedRun {
    let mut c0 = sites.client(0);
    for key in ["a", "b"] {
        assert_eq!(
            c0.call(&["BC.CREATE", key, "LOWER", "0", &start.to_string()]),
            Reply::Ok
        );
        sites.converged(key, &[0, 1, 2], Some(start as i64));
    }
    let ok = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let reserved = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut threads = Vec::new();
    for site in 0..3 {
        let port = sites.resp_ports[site];
        for (i, key) in ["a", "b"].into_iter().enumerate() {
            let ok = Arc::clone(&ok);
            threads.push(std::thread::spawn(move || {
                let (n, _) = drain(port, key, deadline, Some(Duration::from_secs(2)));
                ok[i].fetch_add(n, Ordering::Relaxed);
            }));
        }
        let (ok, reserved) = (Arc::clone(&ok), Arc::clone(&reserved));
        threads.push(std::thread::spawn(move || {
            let mut client = Client::connect(port);
            let mut last_ok = Instant::now();
            while Instant::now() < deadline {
                match client.call(&["FCALL", "reserve", "2", "a", "b", "1"]) {
                    Reply::Array(left) => {
                        assert!(
                            matches!(left[..], [Reply::Int(_), Reply::Int(_)]),
                            "{left:?}"
                        );
                        reserved.fetch_add(1, Ordering::Relaxed);
                        for n in ok.iter() {
                            n.fetch_add(1, Ordering::Relaxed);
                        }
                        last_ok = Instant::now();
                    }
                    Reply::Error(e) if e.starts_with("BOUND") => break,
                    Reply::Error(e) if e.starts_with("RETRY") => {
                        if last_ok.elapsed() > Duration::from_secs(2) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    other => panic!("FCALL reserve: {other:?}"),
                }
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let ok = [0, 1].map(|i| ok[i].load(Ordering::Relaxed));
    let converged = ["a", "b"].map(|key| sites.converged(key, &[0, 1, 2], None));
    SharedRun {
        ok,
        reserved: reserved.load(Ordering::Relaxed),
        converged,
    }
}

/// Procedures (FCALL) and BC.* share a site's rights: a procedure's
/// strictly-local decrements happen inside its transaction, on the rows the
/// site's node also writes, and are shipped to the other sites like the
/// node's own.
#[test]
fn procedures_and_bc_commands_share_a_sites_rights() {
    const START: u64 = 400;
    let _one = exclusive();
    let sites = Sites::start(3);
    let mut c0 = sites.client(0);
    assert_eq!(c0.call(&["BC.CREATE", "x", "LOWER", "0", "50"]), Reply::Ok);
    assert_eq!(c0.call(&["BC.CREATE", "y", "LOWER", "0", "5"]), Reply::Ok);
    // Site 0 holds the rights it created: both decrements, in one call.
    assert_eq!(
        c0.call(&["FCALL", "reserve", "2", "x", "y", "10", "2"]),
        Reply::Array(vec![Reply::Int(40), Reply::Int(3)])
    );
    // All or none: y's bound refuses, so x keeps its 40.
    assert!(matches!(
        c0.call(&["FCALL", "reserve", "2", "x", "y", "1", "4"]),
        Reply::Error(e) if e.starts_with("BOUND")
    ));
    assert_eq!(c0.call(&["BC.GET", "x"]), Reply::Int(40));
    assert!(matches!(
        c0.call(&["FCALL", "reserve", "1", "nosuch", "1"]),
        Reply::Error(e) if e.contains("no such bounded counter")
    ));
    // The other sites learn the procedure's decrements.
    sites.converged("x", &[0, 1, 2], Some(40));
    sites.converged("y", &[0, 1, 2], Some(3));
    // Site 2 holds at most half of x's rights (proactive transfers give no
    // more): strictly local, a procedure may only be told to retry.
    let mut c2 = sites.client(2);
    assert!(matches!(
        c2.call(&["FCALL", "reserve", "1", "x", "30"]),
        Reply::Error(e) if e.starts_with("RETRY")
    ));
    // GLOBAL gathers them (retried while a transfer is in flight).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c2.call(&["BC.DEC", "x", "25", "GLOBAL"]) {
            Reply::Int(left) => {
                assert_eq!(left, 15);
                break;
            }
            Reply::Error(e) if e.starts_with("RETRY") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => panic!("BC.DEC x 25 GLOBAL at site 2: {other:?}"),
        }
    }

    let run = shared_rights_workload(&sites, START);
    println!("{run:?}");
    assert!(run.reserved > 0, "no procedure succeeded: {run:?}");
    for i in 0..2 {
        assert!(run.ok[i] <= START, "the bound was passed: {run:?}");
        assert_eq!(
            run.converged[i],
            (START - run.ok[i]) as i64,
            "every successful decrement, and only those, left the value: {run:?}"
        );
    }
}

/// The same workload with a procedure that writes a row under the token it
/// found (the site's node then takes the row for its own last write): the
/// check above must fail.
#[test]
fn a_procedure_reusing_the_rows_token_is_caught() {
    const START: u64 = 400;
    let _one = exclusive();
    let mut caught = Vec::new();
    for attempt in 0..3 {
        let sites = Sites::start_with(3, &["--plant-bug-keep-site-token"]);
        let run = shared_rights_workload(&sites, START);
        println!("attempt {attempt}: {run:?}");
        let wrong = (0..2)
            .any(|i| run.ok[i] > START || run.converged[i] != START as i64 - run.ok[i] as i64);
        if wrong {
            caught.push(run);
            break;
        }
    }
    assert!(!caught.is_empty(), "the planted lost update went unnoticed");
}

/// Two consecutive free ports (their first).
fn free_pair() -> u16 {
    for _ in 0..100 {
        let first = free_ports(1)[0];
        if first < 65000
            && TcpListener::bind(("127.0.0.1", first)).is_ok()
            && TcpListener::bind(("127.0.0.1", first + 1)).is_ok()
        {
            return first;
        }
    }
    panic!("no two consecutive free ports");
}

fn refuses(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_err()
}

/// `roost up --sites 2` starts two sites that replicate a counter, and stops
/// them on SIGTERM.
#[test]
fn roost_up_sites_runs_and_stops_a_local_deployment() {
    let _one = exclusive();
    let (site_port, resp_port) = (free_pair(), free_pair());
    // Where `roost up` writes the sites' fresh secret.
    let unused = secret_file();
    let _ = std::fs::remove_file(&unused);
    let data_dir = unused.with_extension("d");
    let mut up = Command::new(env!("CARGO_BIN_EXE_roost"))
        .args(["up", "--sites", "2"])
        .arg("--data-dir")
        .arg(&data_dir)
        .args(["--site-port", &site_port.to_string()])
        .args(["--site-resp-port", &resp_port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("roost up starts");
    let mut c0 = Client::connect(resp_port);
    let mut c1 = Client::connect(resp_port + 1);
    assert_eq!(c0.call(&["BC.CREATE", "k", "LOWER", "0", "10"]), Reply::Ok);
    let deadline = Instant::now() + Duration::from_secs(10);
    while c1.call(&["BC.GET", "k"]) != Reply::Int(10) {
        assert!(
            Instant::now() < deadline,
            "site 1 never learned the counter"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(c1.call(&["BC.DEC", "k", "4", "GLOBAL"]), Reply::Int(6));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(up.id() as i32, libc::SIGTERM) };
    let status = up.wait().unwrap();
    assert!(status.success(), "{status}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(refuses(resp_port) && refuses(resp_port + 1)) {
        assert!(Instant::now() < deadline, "the sites outlived roost up");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        data_dir.join("cluster.secret").exists(),
        "roost up wrote the sites' secret"
    );
    let _ = std::fs::remove_dir_all(&data_dir);
}

/// A site needs the deployment's secret: without `--secret-file` (or with a
/// file that is not a secret) `roost resp --site` refuses to start, saying
/// why, instead of running unauthenticated links.
#[test]
fn a_site_without_the_secret_refuses_to_start() {
    let ports = free_ports(3);
    let peers = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
    let bad = secret_file();
    std::fs::write(&bad, "not hex").expect("write");
    for secret in [None, Some(&bad)] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_roost"));
        command
            .args(["resp", "--port", &ports[2].to_string()])
            .args(["--site", "0", "--site-peers", &peers]);
        if let Some(path) = secret {
            command.arg("--secret-file").arg(path);
        }
        let output = command.output().expect("roost resp runs");
        assert!(!output.status.success(), "{secret:?}: started");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("secret"), "{secret:?}: {stderr}");
    }
    let _ = std::fs::remove_file(&bad);
}

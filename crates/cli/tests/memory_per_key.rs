//! Memory per key: a `roost resp` process (the keyspace a cluster node
//! serves, with its production allocator) takes 200,000 keys of 16 bytes
//! with 16-byte values; its resident memory grows by the keys' and values'
//! bytes plus what the store keeps beside them (the entry's stamp and
//! deadline, the record's version, the index). Ownership and replication
//! metadata is per keyspace reactor (64 per node), not per key, so this is
//! the whole per-key cost of a replica. The figure is printed; the test
//! fails if it regresses past a loose bound. Measured: about 420 bytes
//! beyond a 16-byte key and value, against a goal of 64 (issue 17): the
//! keyspace's hashed index keeps each encoded key (reactor prefix and key,
//! past the 14 inline bytes) twice, in the hash index and in its reactor's
//! partition set, each copy two heap blocks (`Box<Box<[u8]>>`), beside the
//! record block and both tables' slack.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KEYS: usize = 200_000;
const WARM_KEYS: usize = 20_000;
const KEY_BYTES: usize = 16;
const VALUE_BYTES: usize = 16;
const PAIRS_PER_MSET: usize = 1_000;
/// A regression guard, not the goal (64 bytes beyond key and value).
const MAX_OVERHEAD_BYTES: f64 = 600.0;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Writes keys `from..to` with MSETs and waits for every `+OK`.
fn fill(con: &mut TcpStream, reader: &mut BufReader<TcpStream>, from: usize, to: usize) {
    let mut start = from;
    while start < to {
        let end = (start + PAIRS_PER_MSET).min(to);
        let mut cmd = format!("*{}\r\n", 1 + 2 * (end - start)).into_bytes();
        bulk(&mut cmd, b"MSET");
        for i in start..end {
            bulk(&mut cmd, format!("key:{i:012}").as_bytes());
            bulk(&mut cmd, format!("v{i:015}").as_bytes());
        }
        con.write_all(&cmd).unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line, "+OK\r\n", "MSET answered {line:?}");
        start = end;
    }
}

fn dbsize(con: &mut TcpStream, reader: &mut BufReader<TcpStream>) -> usize {
    con.write_all(b"*1\r\n$6\r\nDBSIZE\r\n").unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    line.trim().trim_start_matches(':').parse().expect("DBSIZE")
}

#[test]
fn a_key_costs_a_bounded_number_of_bytes_beyond_its_key_and_value() {
    assert_eq!(format!("key:{:012}", 1).len(), KEY_BYTES);
    assert_eq!(format!("v{:015}", 1).len(), VALUE_BYTES);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_roost"))
            .args(["resp", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start roost resp"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut con = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(con) => break con,
            Err(e) => {
                assert!(Instant::now() < deadline, "roost resp never listened: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut reader = BufReader::new(con.try_clone().unwrap());
    // Warm the allocator and the index before measuring.
    fill(&mut con, &mut reader, 0, WARM_KEYS);
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_bytes(server.0.id());
    fill(&mut con, &mut reader, WARM_KEYS, WARM_KEYS + KEYS);
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_bytes(server.0.id());
    assert_eq!(dbsize(&mut con, &mut reader), WARM_KEYS + KEYS);
    let per_key = (after.saturating_sub(before)) as f64 / KEYS as f64;
    let overhead = per_key - (KEY_BYTES + VALUE_BYTES) as f64;
    println!(
        "memory per key: {per_key:.1} bytes resident for a {KEY_BYTES}-byte key and a \
         {VALUE_BYTES}-byte value ({overhead:.1} bytes beyond them; {KEYS} keys, RSS {} -> {} MiB)",
        before >> 20,
        after >> 20
    );
    assert!(
        per_key > (KEY_BYTES + VALUE_BYTES) as f64,
        "resident memory did not grow with the keys: {before} -> {after}"
    );
    assert!(
        overhead <= MAX_OVERHEAD_BYTES,
        "{overhead:.1} bytes per key beyond key and value (bound {MAX_OVERHEAD_BYTES})"
    );
}

//! The Prometheus endpoint (`metrics_bind`): scraped over plain HTTP after a
//! few commands, its counters move and agree with INFO; bad requests get an
//! error status and the endpoint keeps serving.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use roost_resp::protocol::{parse_frame, Frame, Limits, Protocol};
use roost_resp::{Config, RunningServer, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn start() -> RunningServer {
    Server::spawn(Config {
        bind: "127.0.0.1:0".parse().unwrap(),
        metrics_bind: Some("127.0.0.1:0".parse().unwrap()),
        keyspace_reactors: 8,
        executors: 2,
        ..Config::default()
    })
    .expect("server starts")
}

/// Sends `request` as is and returns the status and the body.
async fn http(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    // Done sending (a truncated head is then seen as such).
    stream.shutdown().await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut response))
        .await
        .expect("a response within 20 s")
        .unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// `GET /metrics` as `name{labels}` to value.
async fn scrape(addr: SocketAddr) -> HashMap<String, f64> {
    let (status, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: roost\r\n\r\n").await;
    assert_eq!(status, 200, "{body}");
    let mut samples = HashMap::new();
    for line in body.lines() {
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP roost_resp_") || line.starts_with("# TYPE roost_resp_"),
                "{line}"
            );
            continue;
        }
        let (name, value) = line.rsplit_once(' ').expect("name value");
        assert!(name.starts_with("roost_resp_"), "{line}");
        samples.insert(name.to_owned(), value.parse().expect("a number"));
    }
    samples
}

/// One RESP client on a raw socket.
struct Client {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Client {
    async fn call(&mut self, args: &[&str]) -> Frame {
        let mut wire = Vec::new();
        Frame::Array(args.iter().map(|a| Frame::bulk(a.as_bytes())).collect())
            .encode(Protocol::Resp2, &mut wire);
        self.stream.write_all(&wire).await.unwrap();
        loop {
            if let Some((frame, used)) = parse_frame(&self.buffer, &Limits::default()).unwrap() {
                self.buffer.drain(..used);
                return frame;
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the server closed the connection");
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}

/// INFO's `field:value` lines.
fn info_fields(frame: Frame) -> HashMap<String, String> {
    let Frame::Bulk(text) = frame else {
        panic!("INFO: {frame:?}");
    };
    String::from_utf8(text)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_and_agree_with_info() {
    let server = start();
    let metrics = server.metrics_addr().expect("metrics_bind is set");
    let before = scrape(metrics).await;
    assert_eq!(before["roost_resp_commands_processed_total"], 0.0);
    assert_eq!(before["roost_resp_transaction_latency_seconds_count"], 0.0);

    let mut c = Client {
        stream: TcpStream::connect(server.addr()).await.unwrap(),
        buffer: Vec::new(),
    };
    assert_eq!(c.call(&["SET", "a", "1"]).await, Frame::Simple("OK".into()));
    assert_eq!(c.call(&["GET", "a"]).await, Frame::bulk("1"));
    assert_eq!(c.call(&["INCR", "n"]).await, Frame::Integer(1));
    assert_eq!(c.call(&["INCR", "n"]).await, Frame::Integer(2));
    assert_eq!(c.call(&["MULTI"]).await, Frame::Simple("OK".into()));
    assert_eq!(
        c.call(&["SET", "b", "2"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        c.call(&["EXEC"]).await,
        Frame::Array(vec![Frame::Simple("OK".into())])
    );
    assert!(matches!(
        c.call(&["NOSUCHCOMMAND"]).await,
        Frame::Error(e) if e.contains("unknown command")
    ));

    let after = scrape(metrics).await;
    assert_eq!(after["roost_resp_commands_processed_total"], 8.0);
    assert_eq!(after["roost_resp_connected_clients"], 1.0);
    assert_eq!(after["roost_resp_connections_received_total"], 1.0);
    assert_eq!(
        after["roost_resp_command_calls_total{command=\"set\"}"],
        2.0
    );
    assert_eq!(
        after["roost_resp_command_calls_total{command=\"get\"}"],
        1.0
    );
    assert_eq!(
        after["roost_resp_command_calls_total{command=\"incr\"}"],
        2.0
    );
    assert_eq!(
        after["roost_resp_command_calls_total{command=\"exec\"}"],
        1.0
    );
    // SET, GET, INCR, INCR and the EXEC: one transaction each.
    assert_eq!(after["roost_resp_transactions_committed_total"], 5.0);
    assert!(after["roost_resp_transaction_attempts_total"] >= 5.0);
    assert_eq!(after["roost_resp_transaction_latency_seconds_count"], 5.0);
    assert!(after["roost_resp_transaction_latency_seconds_sum"] > 0.0);
    assert!(after["roost_resp_transaction_latency_seconds{quantile=\"0.99\"}"] > 0.0);

    let info = info_fields(c.call(&["INFO", "everything"]).await);
    let scraped = scrape(metrics).await;
    let agree = |info_field: &str, metric: &str| {
        let from_info: f64 = info[info_field].parse().unwrap();
        assert_eq!(from_info, scraped[metric], "{info_field} vs {metric}");
    };
    agree(
        "total_commands_processed",
        "roost_resp_commands_processed_total",
    );
    agree(
        "total_connections_received",
        "roost_resp_connections_received_total",
    );
    agree("connected_clients", "roost_resp_connected_clients");
    agree(
        "roost_transactions",
        "roost_resp_transactions_committed_total",
    );
    agree(
        "roost_transaction_attempts",
        "roost_resp_transaction_attempts_total",
    );
    agree(
        "roost_conflict_retries",
        "roost_resp_transaction_retries_total",
    );
    agree(
        "roost_failed_transactions",
        "roost_resp_transactions_failed_total",
    );
    agree("roost_watch_aborts", "roost_resp_watch_aborts_total");
    agree("roost_execabort", "roost_resp_execabort_total");
    agree(
        "roost_transaction_count",
        "roost_resp_transaction_latency_seconds_count",
    );
    assert_eq!(info["cmdstat_set"], "calls=2");
    assert_eq!(
        scraped["roost_resp_command_calls_total{command=\"info\"}"],
        1.0
    );
    for (field, quantile) in [
        ("roost_transaction_p50_us", "0.5"),
        ("roost_transaction_p99_us", "0.99"),
        ("roost_transaction_p999_us", "0.999"),
    ] {
        let us: f64 = info[field].parse().unwrap();
        let seconds =
            scraped[&format!("roost_resp_transaction_latency_seconds{{quantile=\"{quantile}\"}}")];
        assert!(
            (us / 1e6 - seconds).abs() < 1e-9,
            "{field}: {us} us vs {seconds} s"
        );
    }
    let sum_us: f64 = info["roost_transaction_sum_us"].parse().unwrap();
    assert!((sum_us / 1e6 - scraped["roost_resp_transaction_latency_seconds_sum"]).abs() < 1e-9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_http_requests_get_errors() {
    let server = start();
    let metrics = server.metrics_addr().unwrap();
    for (request, expected) in [
        (&b"GET /nope HTTP/1.1\r\n\r\n"[..], 404),
        (b"GET / HTTP/1.0\r\n\r\n", 404),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n", 405),
        (b"GET /metrics\r\n\r\n", 400),
        (b"BLAH\r\n\r\n", 400),
        (b"\x00\xff\x10 garbage \x80\r\n\r\n", 400),
        // The peer closes before the head ends.
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n", 400),
    ] {
        let (status, _) = http(metrics, request).await;
        assert_eq!(status, expected, "{}", String::from_utf8_lossy(request));
    }
    // A head larger than the endpoint reads.
    let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'x', 64 << 10));
    let (status, _) = http(metrics, &huge).await;
    assert_eq!(status, 400);
    // A client that connects and leaves.
    drop(TcpStream::connect(metrics).await.unwrap());
    // Still serving, and HEAD has no body.
    let (status, body) = http(metrics, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!((status, body.as_str()), (200, ""));
    assert!(scrape(metrics)
        .await
        .contains_key("roost_resp_uptime_seconds"));
}

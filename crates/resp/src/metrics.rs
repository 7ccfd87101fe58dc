//! The Prometheus endpoint: `GET /metrics` over plain HTTP/1.x, the figures
//! of INFO in Prometheus's text format (see [`Snapshot::prometheus`]).
//!
//! One request per connection (the response closes it). Anything but a
//! well-formed `GET` or `HEAD` of `/metrics` gets an error status: 400 for a
//! malformed or oversized request head, 404 for another path, 405 for another
//! method; a client that sends nothing within [`REQUEST_TIMEOUT`] is dropped.
//!
//! [`Snapshot::prometheus`]: crate::stats::Snapshot::prometheus

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::stats::Stats;

/// Longest request head (request line and headers) read.
const MAX_HEAD_BYTES: usize = 8 << 10;
/// Time a client has to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Scrapes served at once; more wait for their turn.
const MAX_CONCURRENT: usize = 16;

/// How long, and how many bytes, a response's close waits for the client.
const LINGER: Duration = Duration::from_secs(1);
const MAX_LINGER_BYTES: usize = 1 << 20;

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the endpoint on `listener` until the future is dropped.
pub(crate) async fn serve(listener: TcpListener, stats: Arc<Stats>) {
    let slots = Arc::new(Semaphore::new(MAX_CONCURRENT));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let stats = Arc::clone(&stats);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REQUEST_TIMEOUT * 2, answer(stream, &stats)).await;
            drop(slot);
        });
    }
}

async fn answer(mut stream: TcpStream, stats: &Stats) {
    let mut head = Vec::with_capacity(1024);
    let complete = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream, &mut head)).await;
    let response = match complete {
        Ok(Ok(true)) => respond(&head, stats),
        // Closed before a whole head: a truncated request, if anything came.
        Ok(Ok(false)) if !head.is_empty() => error(400, "Bad Request"),
        Ok(Ok(false)) | Ok(Err(_)) => return,
        Err(_) => error(408, "Request Timeout"),
    };
    let _ = stream.write_all(&response).await;
    let _ = stream.shutdown().await;
    // A lingering close: read what else the client sent (an oversized head,
    // a body) before closing, or the unread bytes would make the close a
    // reset that can destroy the response before the client reads it.
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < MAX_LINGER_BYTES {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
}

/// Reads until the blank line that ends the head: `true` if it came, `false`
/// if the peer closed first or the head outgrew [`MAX_HEAD_BYTES`].
async fn read_head(stream: &mut TcpStream, head: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 1024];
    loop {
        if head_end(head).is_some() {
            return Ok(true);
        }
        if head.len() > MAX_HEAD_BYTES {
            // Answered 400 by the caller (it sees no complete head).
            return Ok(false);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(false);
        }
        head.extend_from_slice(&chunk[..n]);
    }
}

fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n")
}

/// The response to a complete request head.
pub(crate) fn respond(head: &[u8], stats: &Stats) -> Vec<u8> {
    let Some(end) = head_end(head) else {
        return error(400, "Bad Request");
    };
    let Ok(head) = std::str::from_utf8(&head[..end]) else {
        return error(400, "Bad Request");
    };
    let request_line = head.split("\r\n").next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return error(400, "Bad Request");
    };
    if !version.starts_with("HTTP/1.")
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !target.starts_with('/')
    {
        return error(400, "Bad Request");
    }
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return error(404, "Not Found");
    }
    let body = match method {
        "GET" | "HEAD" => stats.snapshot().prometheus(),
        _ => return error(405, "Method Not Allowed"),
    };
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method == "GET" {
        response.extend_from_slice(body.as_bytes());
    }
    response
}

fn error(status: u16, reason: &str) -> Vec<u8> {
    let body = format!("{status} {reason}\n");
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(response: &[u8]) -> u16 {
        let text = String::from_utf8_lossy(response);
        text.split(' ').nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn statuses() {
        let stats = Stats::default();
        let ask = |head: &[u8]| status(&respond(head, &stats));
        assert_eq!(ask(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
        assert_eq!(ask(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), 200);
        assert_eq!(ask(b"HEAD /metrics HTTP/1.1\r\n\r\n"), 200);
        assert_eq!(ask(b"GET / HTTP/1.1\r\n\r\n"), 404);
        assert_eq!(ask(b"GET /metricsx HTTP/1.1\r\n\r\n"), 404);
        assert_eq!(ask(b"POST /metrics HTTP/1.1\r\n\r\n"), 405);
        assert_eq!(ask(b"GET /metrics\r\n\r\n"), 400);
        assert_eq!(ask(b"GET /metrics HTTP/2\r\n\r\n"), 400);
        assert_eq!(ask(b"GET  /metrics HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(ask(b"get /metrics HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(ask(b"GET metrics HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(ask(b"\xff\xfe /metrics HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(ask(b"\r\n\r\n"), 400);
        assert_eq!(ask(b"GET /metrics HTTP/1.1\r\n"), 400);
        let head_only = respond(b"HEAD /metrics HTTP/1.1\r\n\r\n", &stats);
        assert!(head_only.ends_with(b"\r\n\r\n"));
    }
}

//! A real redis-server beside Roost, for the tests that compare their
//! replies, and the table lines those tests share.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use roost_resp::protocol::{parse_frame, Frame, Limits};

use super::Raw;

/// A redis-server of its own, killed when dropped.
pub struct RedisServer {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis_server_binary() -> std::path::PathBuf {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("redis-server"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "redis-server is not installed, and this test compares Roost's replies with a real \
             Redis 7's: run scripts/install-deps.sh (Debian's redis-server package)"
        )
    })
}

/// A fresh redis-server on a free port (no persistence, the C locale:
/// SORT ALPHA's `strcoll` then compares bytes, as Roost does), once it
/// answers PING. A missing redis-server fails the test, saying what to
/// install.
pub async fn spawn_redis() -> RedisServer {
    let binary = redis_server_binary();
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(binary)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ])
        .env("LC_ALL", "C")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let server = RedisServer {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(stream) = tokio::net::TcpStream::connect(server.addr).await {
            drop(stream);
            let mut probe = Raw::connect(server.addr).await;
            if probe.call(&["PING"]).await == Frame::Simple("PONG".into()) {
                return server;
            }
        }
        assert!(Instant::now() < deadline, "redis-server did not answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A table line's arguments: split at spaces; `"..."` quotes, with `\xHH`,
/// `\"` and `\\` inside.
pub fn split_args(rest: &str) -> Vec<Vec<u8>> {
    let mut args = Vec::new();
    let bytes = rest.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b' ' {
            i += 1;
            continue;
        }
        let mut arg = Vec::new();
        if bytes[i] == b'"' {
            i += 1;
            while bytes[i] != b'"' {
                if bytes[i] == b'\\' {
                    match bytes[i + 1] {
                        b'x' => {
                            let hex = std::str::from_utf8(&bytes[i + 2..i + 4]).unwrap();
                            arg.push(u8::from_str_radix(hex, 16).unwrap());
                            i += 4;
                        }
                        other => {
                            arg.push(other);
                            i += 2;
                        }
                    }
                } else {
                    arg.push(bytes[i]);
                    i += 1;
                }
            }
            i += 1;
        } else {
            while i < bytes.len() && bytes[i] != b' ' {
                arg.push(bytes[i]);
                i += 1;
            }
        }
        args.push(arg);
    }
    args
}

/// One whole reply, parsed.
pub fn frame_of(bytes: &[u8]) -> Frame {
    parse_frame(bytes, &Limits::default())
        .expect("a reply parses")
        .expect("a whole reply")
        .0
}

//! What the client tests share: a server on an ephemeral port, a `redis`
//! crate connection, and a raw socket client that reads frames exactly.
#![allow(dead_code)]

pub mod redis_server;

use std::net::SocketAddr;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use roost_resp::protocol::{parse_frame, Frame, Limits};
use roost_resp::{Config, RunningServer, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub fn config() -> Config {
    Config {
        bind: "127.0.0.1:0".parse().unwrap(),
        keyspace_reactors: 8,
        executors: 2,
        ..Config::default()
    }
}

pub fn start(config: Config) -> RunningServer {
    Server::spawn(config).expect("server starts")
}

pub async fn connect(addr: SocketAddr) -> MultiplexedConnection {
    redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("connects")
}

pub async fn q<T: redis::FromRedisValue>(
    con: &mut MultiplexedConnection,
    args: &[&str],
) -> redis::RedisResult<T> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(con).await
}

/// A client that sends raw bytes and reads raw frames.
pub struct Raw {
    pub stream: TcpStream,
    buffer: Vec<u8>,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        Raw {
            stream: TcpStream::connect(addr).await.unwrap(),
            buffer: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next frame, or `None` if the server closed the connection.
    pub async fn frame(&mut self) -> Option<Frame> {
        loop {
            if let Some((frame, used)) = parse_frame(&self.buffer, &Limits::default()).unwrap() {
                self.buffer.drain(..used);
                return Some(frame);
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(20), self.stream.read(&mut chunk))
                .await
                .expect("reply within 20 s")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next reply exactly as its bytes came, or `None` if the server
    /// closed the connection.
    pub async fn reply_bytes(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some((_, used)) = parse_frame(&self.buffer, &Limits::default()).unwrap() {
                return Some(self.buffer.drain(..used).collect());
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(20), self.stream.read(&mut chunk))
                .await
                .expect("reply within 20 s")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one command of binary-safe arguments and returns its reply's bytes.
    pub async fn call_bytes(&mut self, args: &[Vec<u8>]) -> Vec<u8> {
        let mut wire = Vec::new();
        Frame::Array(args.iter().map(|a| Frame::Bulk(a.clone())).collect())
            .encode(roost_resp::protocol::Protocol::Resp2, &mut wire);
        self.send(&wire).await;
        self.reply_bytes().await.expect("a reply")
    }

    /// Sends one command without waiting for its reply.
    pub async fn send_command(&mut self, args: &[&str]) {
        let mut wire = Vec::new();
        Frame::Array(args.iter().map(|a| Frame::bulk(a.as_bytes())).collect())
            .encode(roost_resp::protocol::Protocol::Resp2, &mut wire);
        self.send(&wire).await;
    }

    pub async fn call(&mut self, args: &[&str]) -> Frame {
        self.send_command(args).await;
        self.frame().await.expect("a reply")
    }
}

pub fn err(text: &str) -> Frame {
    Frame::Error(text.into())
}

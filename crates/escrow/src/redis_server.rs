//! One `redis-server` per site, as a child process on loopback (Debian's
//! `redis-server` package; `ROOST_REDIS_SERVER` names another binary). No
//! persistence (`--save '' --appendonly no`); killed when dropped.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use thiserror::Error;

/// The binary looked for on `PATH` unless `ROOST_REDIS_SERVER` is set.
pub const DEFAULT_REDIS_SERVER: &str = "redis-server";

#[derive(Debug, Error)]
pub enum LocalRedisError {
    #[error(
        "cannot run `{bin}`: {source}. Install Debian's redis-server (scripts/install-deps.sh \
         or `apt-get install redis-server`) or set ROOST_REDIS_SERVER"
    )]
    Spawn { bin: String, source: std::io::Error },
    #[error("cannot find a free port: {0}")]
    Port(std::io::Error),
    #[error("redis-server on port {port} exited at start ({status})")]
    Exited { port: u16, status: String },
    #[error("redis-server on port {port} did not answer PING within {waited_ms} ms")]
    NotReady { port: u16, waited_ms: u64 },
}

/// The redis-server binary to run.
pub fn redis_server_bin() -> String {
    std::env::var("ROOST_REDIS_SERVER").unwrap_or_else(|_| DEFAULT_REDIS_SERVER.to_owned())
}

/// Whether the binary can be run at all (`--version`).
pub fn redis_server_available() -> bool {
    Command::new(redis_server_bin())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A running redis-server; killed when dropped.
pub struct LocalRedis {
    child: Child,
    port: u16,
}

impl LocalRedis {
    /// Starts a redis-server on a free loopback port and waits until it
    /// answers. A port taken between choosing and binding is retried.
    pub fn start() -> Result<LocalRedis, LocalRedisError> {
        let mut last = None;
        for _ in 0..5 {
            let port = free_port().map_err(LocalRedisError::Port)?;
            match LocalRedis::start_on(port) {
                Ok(redis) => return Ok(redis),
                Err(error @ LocalRedisError::Spawn { .. }) => return Err(error),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or(LocalRedisError::NotReady {
            port: 0,
            waited_ms: 0,
        }))
    }

    /// Starts a redis-server on `port`.
    pub fn start_on(port: u16) -> Result<LocalRedis, LocalRedisError> {
        let bin = redis_server_bin();
        let child = Command::new(&bin)
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| LocalRedisError::Spawn { bin, source })?;
        let mut redis = LocalRedis { child, port };
        redis.wait_ready(Duration::from_secs(10))?;
        Ok(redis)
    }

    fn wait_ready(&mut self, patience: Duration) -> Result<(), LocalRedisError> {
        let started = Instant::now();
        while started.elapsed() < patience {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(LocalRedisError::Exited {
                    port: self.port,
                    status: status.to_string(),
                });
            }
            if ping(self.addr()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(LocalRedisError::NotReady {
            port: self.port,
            waited_ms: u64::try_from(patience.as_millis()).unwrap_or(u64::MAX),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server now (a failed store, for tests).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A raw RESP `PING` (blocking, short timeouts): no runtime needed.
fn ping(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

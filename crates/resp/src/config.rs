//! The server's configuration (TOML): address, limits, the keyspace and its
//! deployment, and users.
//!
//! ```toml
//! bind = "127.0.0.1:6379"
//! metrics_bind = "127.0.0.1:9121" # Prometheus text at GET /metrics (HTTP); default: off
//! requirepass = "secret"          # password of the `default` user (AUTH <password>)
//! max_clients = 10000
//! max_bulk_bytes = 16777216
//! max_array_len = 1048576
//! max_inline_bytes = 65536
//! max_request_bytes = 268435456   # all arguments of one request
//! max_pipeline_depth = 1024       # commands parsed ahead of their replies, per connection
//! max_multi_commands = 10000      # commands queued between MULTI and EXEC
//! max_multi_bytes = 268435456     # their keys' and values' bytes
//! max_watched_keys = 10000        # keys one connection WATCHes at once
//! max_reply_buffer_bytes = 1048576 # replies buffered before the connection writes them
//! max_batch_commands = 64         # pipelined commands run as one root transaction
//! keyspace_reactors = 64          # K: a key hashes to one of K reactors
//! executors = 2                   # reactor executors (threads)
//! io_threads = 1                  # tokio threads: accept (and, with sites, serve) client sockets
//! spin_before_park_us = 50        # executors' spin budgets (roost_reactor::Deployment)
//! spin_while_active_us = 1000
//! expire_sweep_interval_ms = 100  # how often expired keys are reclaimed (CONFIG SET hz)
//! expire_sweep_batch = 200        # the most keys one sweep transaction deletes
//! lua_time_limit_ms = 5000        # past it a Lua script makes others BUSY (SCRIPT KILL)
//!
//! [[users]]
//! name = "reader"
//! password = "reader-secret"
//! access = "read-only"            # or "read-write"
//! ```

use std::net::SocketAddr;

use serde::Deserialize;
use thiserror::Error;

use crate::protocol::Limits;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config TOML: {0}")]
    Toml(String),
    #[error("config: {0}")]
    Invalid(String),
}

/// What a user may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    pub name: String,
    pub password: String,
    pub access: Access,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub bind: SocketAddr,
    /// Where to serve the Prometheus endpoint (`GET /metrics` over plain
    /// HTTP/1.x); `None`: not served.
    pub metrics_bind: Option<SocketAddr>,
    /// The `default` user's password; without it (and without users) no
    /// client needs to authenticate.
    pub requirepass: Option<String>,
    pub max_clients: usize,
    pub max_bulk_bytes: usize,
    pub max_array_len: usize,
    pub max_inline_bytes: usize,
    pub max_request_bytes: usize,
    pub max_pipeline_depth: usize,
    pub max_multi_commands: usize,
    /// The keys' and values' bytes of the commands queued between MULTI and
    /// EXEC (a queued command beyond it is refused and dooms the EXEC).
    pub max_multi_bytes: usize,
    /// Distinct keys one connection WATCHes at once (a WATCH beyond it is
    /// refused and watches none of its keys).
    pub max_watched_keys: usize,
    /// Replies a connection buffers before it writes them out and waits
    /// for the client to read: a client that pipelines without reading is
    /// held by TCP flow control, not by the server's memory. A buffer may
    /// pass it by the replies of one command or one pipeline batch.
    pub max_reply_buffer_bytes: usize,
    pub max_batch_commands: usize,
    pub keyspace_reactors: usize,
    /// Reactor executors: they run the transactions and, without sites, also
    /// serve the client connections (each on one executor's thread).
    pub executors: usize,
    /// Tokio threads that accept connections (and, with sites, serve them).
    pub io_threads: usize,
    /// Passed to the reactor deployment (see `roost_reactor::Deployment`);
    /// `None`: the reactor layer's default.
    pub spin_before_park_us: Option<u64>,
    pub spin_while_active_us: Option<u64>,
    /// How often the background sweep reclaims expired keys (Redis's `hz`
    /// is 1000 / this; CONFIG SET hz changes it while the server runs).
    pub expire_sweep_interval_ms: u64,
    /// The most expired keys one sweep transaction deletes: the bound on a
    /// sweep's work whatever the size of the keyspace.
    pub expire_sweep_batch: usize,
    /// How long a Lua script (EVAL, a Lua FCALL) runs before the other
    /// clients get Redis's BUSY error, until it ends or SCRIPT KILL /
    /// FUNCTION KILL stops it (applying nothing) (Redis's `lua-time-limit`
    /// and `busy-reply-threshold`, whose default this is). A script is
    /// stopped anyway after `scripting::HARD_LIMIT` (300 s).
    pub lua_time_limit_ms: u64,
    pub users: Vec<User>,
    /// This server's tag in the stamps WATCH compares (0..=1023): each node
    /// of a cluster has its own (a cluster node sets its node id), so no
    /// two nodes ever give two writes the same stamp.
    pub stamp_origin: u16,
    /// The password of the forward user ([`FORWARD_USER`](crate::FORWARD_USER)):
    /// a cluster node's peers ship it commands as that user, and this node
    /// ships them its own (each derives it from the cluster secret). Not
    /// settable from a file; `None`: nobody may log in as that user.
    #[serde(skip)]
    pub forward_password: Option<String>,
    /// How long a forwarded command waits for its owner's reply before its
    /// client hears that its outcome is unknown.
    pub forward_timeout_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        let limits = Limits::default();
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 6379)),
            metrics_bind: None,
            requirepass: None,
            max_clients: 10_000,
            max_bulk_bytes: limits.max_bulk_bytes,
            max_array_len: limits.max_array_len,
            max_inline_bytes: limits.max_inline_bytes,
            max_request_bytes: limits.max_request_bytes,
            max_pipeline_depth: 1024,
            max_multi_commands: 10_000,
            max_multi_bytes: limits.max_request_bytes,
            max_watched_keys: 10_000,
            max_reply_buffer_bytes: 1 << 20,
            max_batch_commands: 64,
            keyspace_reactors: 64,
            executors: 2,
            io_threads: 1,
            spin_before_park_us: None,
            spin_while_active_us: None,
            expire_sweep_interval_ms: 100,
            expire_sweep_batch: 200,
            lua_time_limit_ms: crate::scripting::DEFAULT_TIME_LIMIT_MS,
            users: Vec::new(),
            stamp_origin: 0,
            forward_password: None,
            forward_timeout_ms: 10_000,
        }
    }
}

/// Limits on what a configuration may ask for.
const MAX_KEYSPACE_REACTORS: usize = 1 << 20;
const MAX_EXECUTORS: usize = 64;
const MAX_IO_THREADS: usize = 256;
/// Redis's own ceiling for `proto-max-bulk-len`; the storage engine's value
/// limit (16 MiB) applies to stored values in any case.
const MAX_BULK_BYTES: usize = 512 << 20;

impl Config {
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Toml(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_toml(&text)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let range = |name: &str, value: usize, max: usize| {
            if value == 0 || value > max {
                Err(ConfigError::Invalid(format!(
                    "{name} must be 1..={max}, got {value}"
                )))
            } else {
                Ok(())
            }
        };
        range("max_clients", self.max_clients, 1 << 20)?;
        range("max_bulk_bytes", self.max_bulk_bytes, MAX_BULK_BYTES)?;
        range("max_array_len", self.max_array_len, 1 << 30)?;
        range("max_inline_bytes", self.max_inline_bytes, 1 << 20)?;
        range("max_request_bytes", self.max_request_bytes, 4 << 30)?;
        range("max_pipeline_depth", self.max_pipeline_depth, 1 << 20)?;
        range("max_multi_commands", self.max_multi_commands, 1 << 20)?;
        range("max_multi_bytes", self.max_multi_bytes, 4 << 30)?;
        range("max_watched_keys", self.max_watched_keys, 1 << 20)?;
        range(
            "max_reply_buffer_bytes",
            self.max_reply_buffer_bytes,
            1 << 30,
        )?;
        range("max_batch_commands", self.max_batch_commands, 1 << 16)?;
        range(
            "keyspace_reactors",
            self.keyspace_reactors,
            MAX_KEYSPACE_REACTORS,
        )?;
        range("executors", self.executors, MAX_EXECUTORS)?;
        range("io_threads", self.io_threads, MAX_IO_THREADS)?;
        range(
            "expire_sweep_interval_ms",
            self.expire_sweep_interval_ms as usize,
            60_000,
        )?;
        range("expire_sweep_batch", self.expire_sweep_batch, 1 << 20)?;
        if self.stamp_origin > crate::store::MAX_STAMP_ORIGIN {
            return Err(ConfigError::Invalid(format!(
                "stamp_origin must be 0..={}, got {}",
                crate::store::MAX_STAMP_ORIGIN,
                self.stamp_origin
            )));
        }
        if self.lua_time_limit_ms == 0 || self.lua_time_limit_ms > 3_600_000 {
            return Err(ConfigError::Invalid(format!(
                "lua_time_limit_ms must be 1..=3600000, got {}",
                self.lua_time_limit_ms
            )));
        }
        if self.forward_timeout_ms == 0 || self.forward_timeout_ms > 600_000 {
            return Err(ConfigError::Invalid(format!(
                "forward_timeout_ms must be 1..=600000, got {}",
                self.forward_timeout_ms
            )));
        }
        if self.users.iter().any(|u| u.name == crate::FORWARD_USER) {
            return Err(ConfigError::Invalid(format!(
                "user name `{}` is reserved for the cluster's forwarded commands",
                crate::FORWARD_USER
            )));
        }
        let mut names: Vec<&str> = self.users.iter().map(|u| u.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError::Invalid(format!(
                "user `{}` declared twice",
                w[0]
            )));
        }
        if let Some(u) = self
            .users
            .iter()
            .find(|u| u.name.is_empty() || u.name.contains(char::is_whitespace))
        {
            return Err(ConfigError::Invalid(format!(
                "user name `{}` must be non-empty without whitespace",
                u.name
            )));
        }
        if self.users.iter().any(|u| u.name == "default") && self.requirepass.is_some() {
            return Err(ConfigError::Invalid(
                "set the default user's password with requirepass or [[users]], not both".into(),
            ));
        }
        Ok(())
    }

    /// Whether clients must authenticate before running commands.
    pub fn auth_required(&self) -> bool {
        self.requirepass.is_some() || !self.users.is_empty()
    }

    /// The parser limits for authenticated clients.
    pub fn limits(&self) -> Limits {
        Limits {
            max_bulk_bytes: self.max_bulk_bytes,
            max_array_len: self.max_array_len,
            max_inline_bytes: self.max_inline_bytes,
            max_request_bytes: self.max_request_bytes,
            ..Limits::default()
        }
    }

    /// The user `name` with `password`, if they match. The `default` user is
    /// `requirepass`'s (read-write). Compares in time independent of where
    /// the passwords differ.
    pub fn authenticate(&self, name: &str, password: &[u8]) -> Option<Access> {
        if name == crate::FORWARD_USER {
            let pass = self.forward_password.as_ref()?;
            return constant_time_eq(pass.as_bytes(), password).then_some(Access::ReadWrite);
        }
        if name == "default" {
            if let Some(pass) = &self.requirepass {
                return constant_time_eq(pass.as_bytes(), password).then_some(Access::ReadWrite);
            }
        }
        let user = self.users.iter().find(|u| u.name == name)?;
        constant_time_eq(user.password.as_bytes(), password).then_some(user.access)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, &x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_users_and_checks_passwords() {
        let config = Config::from_toml(
            r#"
            requirepass = "pw"
            keyspace_reactors = 8
            [[users]]
            name = "reader"
            password = "r"
            access = "read-only"
            "#,
        )
        .unwrap();
        assert!(config.auth_required());
        assert_eq!(
            config.authenticate("default", b"pw"),
            Some(Access::ReadWrite)
        );
        assert_eq!(config.authenticate("default", b"pw2"), None);
        assert_eq!(config.authenticate("reader", b"r"), Some(Access::ReadOnly));
        assert_eq!(config.authenticate("reader", b""), None);
        assert_eq!(config.authenticate("nobody", b"r"), None);
        assert_eq!(config.metrics_bind, None);
        assert_eq!(
            Config::from_toml("metrics_bind = \"127.0.0.1:9121\"")
                .unwrap()
                .metrics_bind,
            Some("127.0.0.1:9121".parse().unwrap())
        );
        assert!(Config::from_toml("executors = 0").is_err());
        assert!(Config::from_toml("unknown = 1").is_err());
    }
}

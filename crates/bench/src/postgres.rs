//! PostgreSQL as a peer: a throw-away server (Debian's package: `initdb`,
//! `pg_ctl`) on a loopback port, the Smallbank schema loaded, and the mix
//! driven by `pgbench` (PostgreSQL's own client: one connection per client,
//! prepared statements, serialization failures retried with `--max-tries`)
//! with SERIALIZABLE transactions.
//!
//! The transactions are the ones `roost_bench::smallbank` runs on Roost
//! (FaSST's semantics in integer cents), so both systems do the same work;
//! the keys are BenchBase's (uniform over every account).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The mix's scripts, `(file name, weight, body)`; `:a`, `:b` two distinct
/// accounts, uniform over `1..=:accounts`.
const SCRIPTS: [(&str, u32, &str); 6] = [
    (
        "amalgamate",
        15,
        "BEGIN ISOLATION LEVEL SERIALIZABLE;\n\
         SELECT bal AS s0 FROM savings WHERE custid = :a \\gset\n\
         SELECT bal AS c0 FROM checking WHERE custid = :a \\gset\n\
         UPDATE checking SET bal = bal + :s0 + :c0 WHERE custid = :b;\n\
         UPDATE savings SET bal = 0 WHERE custid = :a;\n\
         UPDATE checking SET bal = 0 WHERE custid = :a;\n\
         COMMIT;\n",
    ),
    (
        "balance",
        15,
        "BEGIN ISOLATION LEVEL SERIALIZABLE;\n\
         SELECT s.bal + c.bal FROM savings s JOIN checking c USING (custid) WHERE custid = :a;\n\
         COMMIT;\n",
    ),
    (
        "deposit_checking",
        15,
        "BEGIN ISOLATION LEVEL SERIALIZABLE;\n\
         UPDATE checking SET bal = bal + 130 WHERE custid = :a;\n\
         COMMIT;\n",
    ),
    (
        "send_payment",
        25,
        "BEGIN ISOLATION LEVEL SERIALIZABLE;\n\
         SELECT bal AS c0 FROM checking WHERE custid = :a \\gset\n\
         \\if :c0 < 500\n\
         ROLLBACK;\n\
         \\else\n\
         UPDATE checking SET bal = bal - 500 WHERE custid = :a;\n\
         UPDATE checking SET bal = bal + 500 WHERE custid = :b;\n\
         COMMIT;\n\
         \\endif\n",
    ),
    (
        "transact_saving",
        15,
        "BEGIN ISOLATION LEVEL SERIALIZABLE;\n\
         UPDATE savings SET bal = bal + 2020 WHERE custid = :a;\n\
         COMMIT;\n",
    ),
    (
        "write_check",
        15,
        "BEGIN ISOLATION LEVEL SERIALIZABLE;\n\
         SELECT s.bal + c.bal AS total FROM savings s JOIN checking c USING (custid) WHERE custid = :a \\gset\n\
         \\if :total < 500\n\
         UPDATE checking SET bal = bal - 600 WHERE custid = :a;\n\
         \\else\n\
         UPDATE checking SET bal = bal - 500 WHERE custid = :a;\n\
         \\endif\n\
         COMMIT;\n",
    ),
];

/// Two distinct uniform accounts, before every script.
const PICK_ACCOUNTS: &str = "\\set a random(1, :accounts)\n\
     \\set b random(1, :accounts - 1)\n\
     \\if :b >= :a\n\
     \\set b :b + 1\n\
     \\endif\n";

/// How long the server may take to start or stop.
const PG_CTL_TIMEOUT_S: u32 = 60;
/// Serialization failures pgbench retries a transaction through.
const MAX_TRIES: u32 = 1_000;

/// Why the peer could not be run.
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    #[error("PostgreSQL's server binaries are not installed (no `pg_config --bindir`): install Debian's `postgresql` package (scripts/install-deps.sh does)")]
    NotInstalled,
    #[error("`pgbench` is not on PATH: install Debian's `postgresql-client` package (scripts/install-deps.sh does)")]
    NoPgbench,
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} failed ({status}): {output}")]
    Failed {
        what: String,
        status: String,
        output: String,
    },
    #[error("pgbench printed no tps line: {0}")]
    NoTps(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PostgresError {
    let what = what.into();
    move |source| PostgresError::Io { what, source }
}

/// One pgbench run's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PgbenchResult {
    /// Completed transactions per second (pgbench's `tps`).
    pub tps: f64,
    pub latency_avg_ms: f64,
    /// Transactions that ended in an error after every retry.
    pub failed: u64,
    /// Serialization failures retried.
    pub retried: u64,
}

/// A PostgreSQL server of its own in `dir`, stopped and removed on drop.
pub struct PgServer {
    bindir: PathBuf,
    dir: PathBuf,
    pub port: u16,
    /// `runuser -u postgres`, when this process runs as root (PostgreSQL
    /// refuses to).
    as_postgres: bool,
}

impl PgServer {
    /// `initdb` and `pg_ctl start` on `port` (loopback TCP only).
    pub fn start(dir: &Path, port: u16) -> Result<PgServer, PostgresError> {
        let bindir = bindir()?;
        let as_postgres = unsafe { libc::geteuid() } == 0;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let server = PgServer {
            bindir,
            dir: dir.to_owned(),
            port,
            as_postgres,
        };
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir)
                .status()
                .map_err(io("chown"))?;
            if !status.success() {
                return Err(PostgresError::Failed {
                    what: format!("chown postgres {}", dir.display()),
                    status: status.to_string(),
                    output: String::new(),
                });
            }
        }
        let data = dir.join("data");
        server.run(
            "initdb",
            server
                .command("initdb")
                .args([
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--no-sync",
                    "-D",
                ])
                .arg(&data),
        )?;
        let options = format!(
            "-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} \
             -c max_connections=300 -c shared_buffers=1GB -c max_pred_locks_per_transaction=256",
            dir.display()
        );
        server.run(
            "pg_ctl start",
            server
                .command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(dir.join("server.log"))
                .args([
                    "-o",
                    &options,
                    "-w",
                    "-t",
                    &PG_CTL_TIMEOUT_S.to_string(),
                    "start",
                ]),
        )?;
        Ok(server)
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bindir.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn run(&self, what: &str, command: &mut Command) -> Result<Output, PostgresError> {
        let output = command.output().map_err(io(what))?;
        if !output.status.success() {
            return Err(PostgresError::Failed {
                what: what.to_owned(),
                status: output.status.to_string(),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            });
        }
        Ok(output)
    }

    /// Runs SQL through `psql` (stops at the first error).
    pub fn sql(&self, sql: &str) -> Result<String, PostgresError> {
        let output = self.run(
            "psql",
            Command::new("psql")
                .args([
                    "-X",
                    "-q",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                ])
                .args(["-p", &self.port.to_string(), "-d", "postgres", "-c", sql]),
        )?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The Smallbank tables with `accounts` accounts, each balance at
    /// `initial_cents`, analysed.
    pub fn load_smallbank(&self, accounts: u64, initial_cents: i64) -> Result<(), PostgresError> {
        self.sql(&format!(
            "CREATE TABLE accounts (custid BIGINT PRIMARY KEY, name VARCHAR(64) NOT NULL);\n\
             CREATE TABLE savings (custid BIGINT PRIMARY KEY REFERENCES accounts, bal BIGINT NOT NULL);\n\
             CREATE TABLE checking (custid BIGINT PRIMARY KEY REFERENCES accounts, bal BIGINT NOT NULL);\n\
             INSERT INTO accounts SELECT i, 'customer' || i FROM generate_series(1, {accounts}) i;\n\
             INSERT INTO savings SELECT i, {initial_cents} FROM generate_series(1, {accounts}) i;\n\
             INSERT INTO checking SELECT i, {initial_cents} FROM generate_series(1, {accounts}) i;"
        ))?;
        // (psql -c runs one transaction; VACUUM cannot run inside one.)
        self.sql("VACUUM ANALYZE")?;
        Ok(())
    }

    /// `synchronous_commit` on (every commit waits for its WAL fsync) or
    /// off, from the next transaction.
    pub fn set_synchronous_commit(&self, on: bool) -> Result<(), PostgresError> {
        let value = if on { "on" } else { "off" };
        self.sql(&format!("ALTER SYSTEM SET synchronous_commit = {value}"))?;
        self.sql("SELECT pg_reload_conf()")?;
        Ok(())
    }

    /// pgbench with `clients` connections for `seconds` on the mix.
    pub fn pgbench(
        &self,
        accounts: u64,
        clients: u32,
        seconds: u32,
    ) -> Result<PgbenchResult, PostgresError> {
        let scripts = self.dir.join("scripts");
        std::fs::create_dir_all(&scripts).map_err(io("creating the pgbench scripts' folder"))?;
        let mut command = Command::new("pgbench");
        command
            .args(["-n", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-p", &self.port.to_string()])
            .args([
                "-c",
                &clients.to_string(),
                "-j",
                &clients.min(4).to_string(),
            ])
            .args(["-T", &seconds.to_string(), "-M", "prepared"])
            .args(["--max-tries", &MAX_TRIES.to_string()])
            .args(["-D", &format!("accounts={accounts}")]);
        for (name, weight, body) in SCRIPTS {
            let path = scripts.join(format!("{name}.sql"));
            std::fs::write(&path, format!("{PICK_ACCOUNTS}{body}"))
                .map_err(io(format!("writing {}", path.display())))?;
            command
                .arg("-f")
                .arg(format!("{}@{weight}", path.display()));
        }
        command.arg("postgres");
        let output = self.run("pgbench", &mut command)?;
        parse_pgbench(&String::from_utf8_lossy(&output.stdout))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let deadline = Instant::now() + Duration::from_secs(5);
        while data.join("postmaster.pid").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// PostgreSQL's server binaries (`pg_config --bindir`).
fn bindir() -> Result<PathBuf, PostgresError> {
    if Command::new("pgbench").arg("--version").output().is_err() {
        return Err(PostgresError::NoPgbench);
    }
    let has_server = |dir: &Path| dir.join("initdb").exists() && dir.join("pg_ctl").exists();
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if output.status.success() && has_server(&dir) {
            return Ok(dir);
        }
    }
    // Debian's layout without pg_config: the newest major version.
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| PostgresError::NotInstalled)?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_server(dir))
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, dir)| dir)
        .ok_or(PostgresError::NotInstalled)
}

/// tps, average latency, failures and retries from pgbench's report.
fn parse_pgbench(out: &str) -> Result<PgbenchResult, PostgresError> {
    let number = |prefix: &str| -> Option<f64> {
        let line = out.lines().find(|l| l.trim_start().starts_with(prefix))?;
        let rest = line.trim_start().strip_prefix(prefix)?.trim_start();
        rest.split_whitespace().next()?.parse().ok()
    };
    let tps = number("tps =").ok_or_else(|| PostgresError::NoTps(out.to_owned()))?;
    Ok(PgbenchResult {
        tps,
        latency_avg_ms: number("latency average =").unwrap_or(0.0),
        failed: number("number of failed transactions:").unwrap_or(0.0) as u64,
        retried: number("number of transactions retried:").unwrap_or(0.0) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_reports_are_read_and_the_mix_is_smallbanks() {
        let report = "transaction type: multiple scripts\n\
            number of transactions actually processed: 86000\n\
            number of failed transactions: 3 (0.003%)\n\
            number of transactions retried: 120 (0.1%)\n\
            latency average = 0.930 ms\n\
            initial connection time = 12.3 ms\n\
            tps = 8612.345678 (without initial connection time)\n";
        let r = parse_pgbench(report).unwrap();
        assert_eq!(r.tps, 8612.345678);
        assert_eq!(r.latency_avg_ms, 0.93);
        assert_eq!((r.failed, r.retried), (3, 120));
        assert!(matches!(parse_pgbench("no"), Err(PostgresError::NoTps(_))));
        let weights: Vec<u32> = SCRIPTS.iter().map(|s| s.1).collect();
        let fasst: Vec<u32> = crate::smallbank::MIX.iter().map(|m| m.1).collect();
        assert_eq!(weights, fasst);
    }
}

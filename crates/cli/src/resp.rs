//! `roost resp`: one node's RESP client port (Redis protocol) over an
//! embedded single-node Roost; with `--site I --site-peers A0,A1,..`, the
//! node is site I of a geo-replicated deployment and its bounded counters
//! (BC.*) are an escrow site's, kept inside Roost.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use clap::Args;
use roost_bcounter::ReplicaId;
use roost_escrow::roost_store::RowFuture;
use roost_escrow::store::Tokens;
use roost_escrow::{
    apply_strictly_local, default_policy, state_value, EscrowCounters, EscrowError, Flag,
    LocalStep, Op, Outcome, ReplicaRow, ReplicaRows, ServerMiddleware, Site, SiteConfig, Timing,
};
use roost_resp::sites::{Bound, SiteFuture};
use roost_resp::{
    Config, Keyspace, LocalApplied, Server, Services, SiteCounters, SiteOutcome, SiteRow,
};

#[derive(Debug, Args)]
pub struct RespArgs {
    /// Port to listen on (overrides the config's `bind` port; 0 picks a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Address to listen on (overrides the config's `bind` address).
    #[arg(long)]
    pub bind: Option<std::net::IpAddr>,
    /// Server configuration (TOML: limits, keyspace, requirepass, users).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Serve Prometheus metrics (`GET /metrics`, plain HTTP) on this port, on
    /// the config's `metrics_bind` address or else the listening one
    /// (overrides `metrics_bind`'s port; 0 picks a free one).
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// This node is site I of a geo-replicated deployment (needs
    /// `--site-peers`): BC.* use the site's bounded counters.
    #[arg(long, requires = "site_peers")]
    pub site: Option<usize>,
    /// Every site's address for site-to-site traffic, in site order
    /// (comma-separated host:port; this site listens on its own entry).
    #[arg(long, value_delimiter = ',', requires = "site")]
    pub site_peers: Vec<SocketAddr>,
    /// With --site: the file holding the deployment's shared secret in hex
    /// (at least 16 bytes, the format of `roost up`'s cluster.secret); every
    /// site-to-site link proves it, so a connection without it changes
    /// nothing. Required with --site.
    #[arg(long, value_name = "FILE", requires = "site")]
    pub secret_file: Option<PathBuf>,
    /// Test-only fault (the sites test must catch it): a procedure writes a
    /// site counter's row under the token it found, not a fresh one.
    #[arg(long, hide = true)]
    pub plant_bug_keep_site_token: bool,
}

impl RespArgs {
    pub fn config(&self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        let ip = self.bind.unwrap_or(config.bind.ip());
        let port = self.port.unwrap_or(config.bind.port());
        config.bind = SocketAddr::new(ip, port);
        if let Some(metrics_port) = self.metrics_port {
            let metrics_ip = config.metrics_bind.map_or(ip, |addr| addr.ip());
            config.metrics_bind = Some(SocketAddr::new(metrics_ip, metrics_port));
        }
        Ok(config)
    }
}

/// Runs the server until the process is stopped.
pub fn run(args: &RespArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let mut services = Services::examples();
    if args.plant_bug_keep_site_token {
        services.functions.plant_bug_keep_site_token();
    }
    // Kept alive with the server: the site's runtime and its tasks.
    let site = match args.site {
        Some(index) => {
            // The site's counters are rows of the keyspace, so procedures
            // (FCALL) update them inside their transactions.
            let keyspace = Keyspace::new(&config).context("starting the keyspace")?;
            let rows = Arc::new(KeyspaceRows {
                keyspace: keyspace.clone(),
            });
            let path = args
                .secret_file
                .as_ref()
                .context("--site needs --secret-file (the deployment's shared secret)")?;
            let secret = roost_cluster::config::SecurityConfig {
                secret_file: path.clone(),
            }
            .load_secret()?;
            let site = SiteNode::start(index, &args.site_peers, rows, secret)?;
            println!(
                "roost resp: site {index} of {}, sites reach it on {}",
                args.site_peers.len(),
                args.site_peers[index]
            );
            services.site_counters = Some(Arc::new(site.counters(index, args.site_peers.len())?));
            services.keyspace = Some(keyspace);
            Some(site)
        }
        None => None,
    };
    let server =
        Server::spawn_with_services(config, services).context("starting the RESP server")?;
    println!("roost resp: listening on {}", server.addr());
    if let Some(metrics) = server.metrics_addr() {
        println!("roost resp: metrics on http://{metrics}/metrics");
    }
    server.wait();
    drop(site);
    Ok(())
}

/// An escrow site ([`Design::Roost`]: its counters inside Roost) on a runtime
/// of its own.
struct SiteNode {
    site: Site,
    _runtime: tokio::runtime::Runtime,
}

impl SiteNode {
    fn start(
        index: usize,
        peers: &[SocketAddr],
        rows: Arc<dyn ReplicaRows>,
        secret: roost_net::ClusterSecret,
    ) -> anyhow::Result<SiteNode> {
        if index >= peers.len() {
            bail!(
                "--site {index} needs at least {} addresses in --site-peers, got {}",
                index + 1,
                peers.len()
            );
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("roost-site")
            .enable_all()
            .build()
            .context("starting the site's runtime")?;
        let config = SiteConfig {
            site: index,
            sites: peers.len(),
            redis_url: String::new(),
            peers: peers
                .iter()
                .enumerate()
                .map(|(i, addr)| (i != index).then_some(*addr))
                .collect(),
            timing: Timing::default(),
            policy: default_policy(),
            secret,
            client_listen: None,
            planted: Default::default(),
        };
        let site = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind(peers[index])
                .await
                .with_context(|| format!("listening for sites on {}", peers[index]))?;
            Site::start_over_rows(config, listener, rows)
                .await
                .context("starting the site")
        })?;
        Ok(SiteNode {
            site,
            _runtime: runtime,
        })
    }

    fn counters(&self, index: usize, sites: usize) -> anyhow::Result<EscrowSiteCounters> {
        let client = self
            .site
            .server_client()
            .context("the site has no middleware node")?;
        Ok(EscrowSiteCounters {
            client,
            me: ReplicaId::from_index(index).context("site index")?,
            sites,
            tokens: Tokens::new(),
        })
    }
}

/// The site's replica rows in the node's keyspace.
struct KeyspaceRows {
    keyspace: Keyspace,
}

impl ReplicaRows for KeyspaceRows {
    fn load(&self, key: &str) -> RowFuture<'_, Result<Option<ReplicaRow>, String>> {
        let key = key.to_owned();
        Box::pin(async move {
            let row = self.keyspace.site_row(&key).await?;
            Ok(row.map(|row| ReplicaRow {
                state: row.state,
                token: row.token,
            }))
        })
    }

    fn cas(
        &self,
        key: &str,
        expected: Option<&str>,
        row: ReplicaRow,
    ) -> RowFuture<'_, Result<bool, String>> {
        let (key, expected) = (key.to_owned(), expected.map(str::to_owned));
        Box::pin(async move {
            let row = SiteRow {
                state: row.state,
                token: row.token,
            };
            self.keyspace
                .site_row_cas(&key, expected.as_deref(), row)
                .await
        })
    }

    fn keys(&self) -> RowFuture<'_, Result<Vec<String>, String>> {
        Box::pin(self.keyspace.site_row_keys())
    }
}

fn site_outcome(outcome: Outcome) -> SiteOutcome {
    match outcome {
        Outcome::Ok => SiteOutcome::Ok,
        Outcome::Fail => SiteOutcome::Fail,
        Outcome::Retry { global_may_succeed } => SiteOutcome::Retry { global_may_succeed },
    }
}

/// The version of the reports BC.FENCE gives and BC.ADOPT takes.
const REPORT_VERSION: u32 = 1;

/// A §IV-E report on the wire (JSON inside RESP): versioned, as every
/// serialized bounded-counter type.
#[derive(serde::Serialize, serde::Deserialize)]
struct VersionedReport {
    version: u32,
    report: roost_escrow::FailedReplicaReport,
}

/// The RESP front door's BC.* over an escrow site's node, and procedures'
/// strictly-local operations on its rows.
struct EscrowSiteCounters {
    client: ServerMiddleware,
    me: ReplicaId,
    sites: usize,
    /// Tokens of procedures' writes (a writer of their own).
    tokens: Tokens,
}

fn text(error: EscrowError) -> String {
    error.to_string()
}

impl SiteCounters for EscrowSiteCounters {
    fn create(
        &self,
        key: &str,
        bound: Bound,
        k: i64,
        initial: i64,
    ) -> SiteFuture<'_, Result<(), String>> {
        let (mut client, key) = (self.client.clone(), key.to_owned());
        Box::pin(async move {
            // The initial value's distance to the bound is rights, added by
            // the operation that needs none (an increment of a lower bound).
            let rights = match bound {
                Bound::Lower => i128::from(initial) - i128::from(k),
                Bound::Upper => i128::from(k) - i128::from(initial),
            };
            let rights = u64::try_from(rights)
                .map_err(|_| format!("the initial value {initial} is beyond the bound {k}"))?;
            if client.read(&key).await.is_ok() {
                return Err("key already exists".to_owned());
            }
            // One type: both crates re-export roost-bcounter's `Bound`.
            client.create(&key, bound, k).await.map_err(text)?;
            if rights > 0 {
                let outcome = match bound {
                    Bound::Lower => client.inc(&key, rights, Flag::StrictLocal).await,
                    Bound::Upper => client.dec(&key, rights, Flag::StrictLocal).await,
                }
                .map_err(text)?;
                if outcome != Outcome::Ok {
                    return Err(format!("setting the initial value: {outcome:?}"));
                }
            }
            Ok(())
        })
    }

    fn add(
        &self,
        key: &str,
        up: bool,
        delta: u64,
        global: bool,
    ) -> SiteFuture<'_, Result<SiteOutcome, String>> {
        let (mut client, key) = (self.client.clone(), key.to_owned());
        Box::pin(async move {
            let flag = if global {
                Flag::Global
            } else {
                Flag::StrictLocal
            };
            let outcome = if up {
                client.inc(&key, delta, flag).await
            } else {
                client.dec(&key, delta, flag).await
            }
            .map_err(text)?;
            Ok(site_outcome(outcome))
        })
    }

    fn fence_and_report(
        &self,
        failed: usize,
    ) -> SiteFuture<'_, Result<Vec<(String, String)>, String>> {
        let client = self.client.clone();
        Box::pin(async move {
            let reports = client.fence_and_report(failed).await.map_err(text)?;
            reports
                .into_iter()
                .map(|(key, report)| {
                    let versioned = VersionedReport {
                        version: REPORT_VERSION,
                        report,
                    };
                    serde_json::to_string(&versioned)
                        .map(|json| (key, json))
                        .map_err(|e| e.to_string())
                })
                .collect()
        })
    }

    fn adopt(
        &self,
        failed: usize,
        key: &str,
        reports: Vec<String>,
    ) -> SiteFuture<'_, Result<u64, String>> {
        let (client, key) = (self.client.clone(), key.to_owned());
        Box::pin(async move {
            let reports = reports
                .iter()
                .map(|json| {
                    let versioned: VersionedReport = serde_json::from_str(json)
                        .map_err(|e| format!("a report is not a report: {e}"))?;
                    if versioned.version != REPORT_VERSION {
                        return Err(format!(
                            "report version {} is not supported (this node reads {REPORT_VERSION})",
                            versioned.version
                        ));
                    }
                    Ok(versioned.report)
                })
                .collect::<Result<Vec<_>, String>>()?;
            client.adopt(failed, &key, reports).await.map_err(text)
        })
    }

    fn state_value(&self, key: &str, state: &str) -> Result<i64, String> {
        state_value(key, state, self.me, self.sites).map_err(text)
    }

    fn apply_local(
        &self,
        key: &str,
        state: &str,
        up: bool,
        delta: u64,
    ) -> Result<LocalApplied, String> {
        let op = if up { Op::inc(delta) } else { Op::dec(delta) };
        Ok(
            match apply_strictly_local(key, state, self.me, self.sites, op).map_err(text)? {
                LocalStep::Applied { state, value } => LocalApplied::Applied {
                    state,
                    token: self.tokens.next(),
                    value,
                },
                LocalStep::Refused(outcome) => LocalApplied::Refused(site_outcome(outcome)),
            },
        )
    }

    fn changed(&self, key: &str) {
        // A key the site refuses cannot have a row; nothing to ship.
        let _ = self.client.reload(key);
    }

    fn value(&self, key: &str) -> SiteFuture<'_, Result<Option<i64>, String>> {
        let (mut client, key) = (self.client.clone(), key.to_owned());
        Box::pin(async move {
            match client.read(&key).await {
                Ok(value) => Ok(Some(value)),
                Err(EscrowError::UnknownCounter { .. }) => Ok(None),
                Err(e) => Err(text(e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_overrides_the_config() {
        let args = RespArgs {
            port: Some(7000),
            bind: None,
            config: None,
            metrics_port: None,
            site: None,
            site_peers: Vec::new(),
            secret_file: None,
            plant_bug_keep_site_token: false,
        };
        let config = args.config().unwrap();
        assert_eq!(config.bind, "127.0.0.1:7000".parse().unwrap());
        assert_eq!(config.metrics_bind, None);
    }

    #[test]
    fn metrics_port_serves_on_the_listening_address() {
        let args = RespArgs {
            port: Some(7000),
            bind: Some("0.0.0.0".parse().unwrap()),
            config: None,
            metrics_port: Some(9121),
            site: None,
            site_peers: Vec::new(),
            secret_file: None,
            plant_bug_keep_site_token: false,
        };
        let config = args.config().unwrap();
        assert_eq!(config.metrics_bind, Some("0.0.0.0:9121".parse().unwrap()));
    }
}

//! `roost resp`: one node's RESP client port (Redis protocol) over an
//! embedded single-node Roost; with `--site I --site-peers A0,A1,..`, the
//! node is site I of a geo-replicated deployment and its bounded counters
//! (BC.*) are an escrow site's, kept inside Roost.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use clap::Args;
use roost_escrow::{default_policy, KeyspaceSite, SiteConfig, Timing};
use roost_resp::{Config, Keyspace, Server, Services};

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
            let path = args
                .secret_file
                .as_ref()
                .context("--site needs --secret-file (the deployment's shared secret)")?;
            let secret = roost_cluster::config::SecurityConfig {
                secret_file: path.clone(),
            }
            .load_secret()?;
            let site = SiteNode::start(index, &args.site_peers, keyspace.clone(), secret)?;
            println!(
                "roost resp: site {index} of {}, sites reach it on {}",
                args.site_peers.len(),
                args.site_peers[index]
            );
            services.site_counters = Some(site.site.counters());
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
    site: KeyspaceSite,
    _runtime: tokio::runtime::Runtime,
}

impl SiteNode {
    fn start(
        index: usize,
        peers: &[SocketAddr],
        keyspace: Keyspace,
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
            peers: peers.iter().map(|addr| vec![*addr]).collect(),
            member: 0,
            members: 1,
            timing: Timing::default(),
            policy: default_policy(),
            secret,
            client_listen: None,
            planted: Default::default(),
        };
        let site = runtime
            .block_on(KeyspaceSite::start(config, peers[index], keyspace))
            .context("starting the site")?;
        Ok(SiteNode {
            site,
            _runtime: runtime,
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

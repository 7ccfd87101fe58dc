//! `roost resp`: one node's RESP client port (Redis protocol) over an
//! embedded single-node Roost.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use roost_resp::{Config, Server};

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
    let server = Server::spawn(config).context("starting the RESP server")?;
    println!("roost resp: listening on {}", server.addr());
    if let Some(metrics) = server.metrics_addr() {
        println!("roost resp: metrics on http://{metrics}/metrics");
    }
    server.wait();
    Ok(())
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
        };
        let config = args.config().unwrap();
        assert_eq!(config.metrics_bind, Some("0.0.0.0:9121".parse().unwrap()));
    }
}

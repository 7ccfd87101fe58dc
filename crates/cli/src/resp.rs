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
        Ok(config)
    }
}

/// Runs the server until the process is stopped.
pub fn run(args: &RespArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let server = Server::spawn(config).context("starting the RESP server")?;
    println!("roost resp: listening on {}", server.addr());
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
        };
        let config = args.config().unwrap();
        assert_eq!(config.bind, "127.0.0.1:7000".parse().unwrap());
    }
}

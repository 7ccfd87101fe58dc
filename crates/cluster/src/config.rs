//! The static cluster configuration: node ids and addresses, membership
//! timing. A TOML file:
//!
//! ```toml
//! [membership]            # optional; these are the defaults
//! heartbeat_interval_ms = 50
//! suspect_after_ms = 150
//! lease_duration_ms = 400
//! clock_drift_margin_ms = 20
//! proposal_timeout_ms = 800
//!
//! [coordinator]           # optional: membership from etcd (see `coordinated`)
//! etcd_endpoints = ["127.0.0.1:2379"]
//! lease_ttl_s = 2
//!
//! [[node]]
//! id = 0
//! addr = "127.0.0.1:7000"        # the cluster (transport) port
//! admin_addr = "127.0.0.1:7100"  # status, metrics, chaos, register (HTTP)
//! ```

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use roost_net::NodeId;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::coordinated::{CoordinatorConfig, CoordinatorConfigError};
use crate::membership::{MembershipConfig, MAX_NODES};
use crate::register::RegisterConfig;

/// Default cluster port of node `i` is `DEFAULT_CLUSTER_PORT + i`.
pub const DEFAULT_CLUSTER_PORT: u16 = 7000;
/// Default admin port of node `i` is `DEFAULT_ADMIN_PORT + i`.
pub const DEFAULT_ADMIN_PORT: u16 = 7100;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAddr {
    pub id: u32,
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// Where the node serves RESP clients, when it does: the other nodes
    /// ship writes there for reactors it owns (instead of moving them), so
    /// without it nothing is forwarded to the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp_addr: Option<SocketAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    #[serde(rename = "node")]
    pub nodes: Vec<NodeAddr>,
    #[serde(default)]
    pub membership: MembershipConfig,
    #[serde(default)]
    pub register: RegisterConfig,
    /// Membership from etcd (the production path); without this section the
    /// nodes run the peer-to-peer lease membership of [`crate::membership`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<CoordinatorConfig>,
    /// Node-to-node authentication; without it, connections are not
    /// authenticated (the node logs a warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<SecurityConfig>,
    /// Whether a node ships writes to the owner of a reactor it lost
    /// lately instead of taking the reactor back (the node's migrate or
    /// forward policy).
    #[serde(default)]
    pub forwarding: ForwardingConfig,
    /// This cluster is one site of a geo-replicated deployment (its bounded
    /// counters, BC.*, are the site's, and every node of the cluster serves
    /// them over the site's rows, replicated by reliable commit); without
    /// it the cluster is a deployment of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo: Option<GeoConfig>,
}

/// Where this cluster sits among the sites of a geo-replicated deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoConfig {
    /// This cluster's site index (its replica id in every bounded counter).
    pub site: usize,
    /// Every site's nodes' addresses for site-to-site traffic, in site
    /// order; this site's entry lists this cluster's nodes in `[[node]]`
    /// order (each listens on its own entry).
    pub sites: Vec<Vec<SocketAddr>>,
}

/// The most sites a deployment may have (the bounded counter's replicas).
pub const MAX_SITES: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForwardingConfig {
    /// `false`: every write runs where it arrived, acquiring what it lacks
    /// (Zeus's migration alone).
    pub enabled: bool,
}

impl Default for ForwardingConfig {
    fn default() -> Self {
        ForwardingConfig { enabled: true }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityConfig {
    /// A file holding the cluster's shared secret in hex (at least 16 bytes);
    /// every node of the cluster reads the same one. Keep it mode 0600.
    pub secret_file: std::path::PathBuf,
}

impl SecurityConfig {
    /// Reads and parses the secret.
    pub fn load_secret(&self) -> Result<roost_net::ClusterSecret, ConfigError> {
        let shown = self.secret_file.display().to_string();
        let text =
            std::fs::read_to_string(&self.secret_file).map_err(|source| ConfigError::Read {
                path: shown.clone(),
                source,
            })?;
        roost_net::ClusterSecret::from_hex(&text).map_err(|e| ConfigError::Parse {
            path: shown,
            message: format!("cluster secret: {e}"),
        })
    }
}

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("the configuration lists no nodes")]
    NoNodes,
    #[error("{0} nodes configured; at most {MAX_NODES}")]
    TooManyNodes(usize),
    #[error("node id {0} appears twice")]
    DuplicateId(u32),
    #[error("address {0} appears twice")]
    DuplicateAddr(SocketAddr),
    #[error("no node with id {0} in the configuration")]
    UnknownNode(u32),
    #[error("membership: {0}")]
    Membership(#[from] crate::membership::MembershipConfigError),
    #[error("register: retry_ms and op_timeout_ms must be positive")]
    Register,
    #[error(transparent)]
    Coordinator(#[from] CoordinatorConfigError),
    #[error("[geo]: {0}")]
    Geo(String),
}

impl ClusterConfig {
    /// `n` nodes on loopback with the default ports.
    pub fn local(n: u32) -> Self {
        let nodes = (0..n)
            .map(|i| NodeAddr {
                id: i,
                addr: SocketAddr::from(([127, 0, 0, 1], DEFAULT_CLUSTER_PORT + i as u16)),
                admin_addr: SocketAddr::from(([127, 0, 0, 1], DEFAULT_ADMIN_PORT + i as u16)),
                resp_addr: None,
            })
            .collect();
        ClusterConfig {
            nodes,
            membership: MembershipConfig::default(),
            register: RegisterConfig::default(),
            coordinator: None,
            security: None,
            forwarding: ForwardingConfig::default(),
            geo: None,
        }
    }

    /// `n` nodes on loopback, each on two ports free right now (cluster and
    /// admin): for clusters inside one process (tests, benchmarks).
    pub fn loopback(n: u32) -> std::io::Result<Self> {
        let ports = crate::local_cluster::free_ports(2 * n as usize)?;
        let nodes = (0..n)
            .map(|i| NodeAddr {
                id: i,
                addr: SocketAddr::from(([127, 0, 0, 1], ports[2 * i as usize])),
                admin_addr: SocketAddr::from(([127, 0, 0, 1], ports[2 * i as usize + 1])),
                resp_addr: None,
            })
            .collect();
        Ok(ClusterConfig {
            nodes,
            ..ClusterConfig::local(n)
        })
    }

    pub fn from_toml(text: &str, path: &str) -> Result<Self, ConfigError> {
        let config: ClusterConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_toml(&text, &shown)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a cluster configuration serializes")
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.nodes.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        if self.nodes.len() > MAX_NODES {
            return Err(ConfigError::TooManyNodes(self.nodes.len()));
        }
        let mut ids = BTreeSet::new();
        let mut addrs = BTreeSet::new();
        for node in &self.nodes {
            if !ids.insert(node.id) {
                return Err(ConfigError::DuplicateId(node.id));
            }
            for addr in [node.addr, node.admin_addr] {
                if !addrs.insert(addr) {
                    return Err(ConfigError::DuplicateAddr(addr));
                }
            }
        }
        self.membership.validate()?;
        if self.register.retry_ms == 0 || self.register.op_timeout_ms == 0 {
            return Err(ConfigError::Register);
        }
        if let Some(coordinator) = &self.coordinator {
            coordinator.validate()?;
        }
        if let Some(geo) = &self.geo {
            self.validate_geo(geo, &addrs)?;
        }
        Ok(())
    }

    fn validate_geo(
        &self,
        geo: &GeoConfig,
        taken: &BTreeSet<SocketAddr>,
    ) -> Result<(), ConfigError> {
        let bad = |reason: String| Err(ConfigError::Geo(reason));
        if geo.sites.len() > MAX_SITES {
            return bad(format!("{} sites; at most {MAX_SITES}", geo.sites.len()));
        }
        let Some(mine) = geo.sites.get(geo.site) else {
            return bad(format!("site {} of {} sites", geo.site, geo.sites.len()));
        };
        if mine.len() != self.nodes.len() {
            return bad(format!(
                "site {} lists {} addresses for this cluster's {} nodes (one per [[node]], in order)",
                geo.site,
                mine.len(),
                self.nodes.len()
            ));
        }
        let mut seen = BTreeSet::new();
        for (site, addrs) in geo.sites.iter().enumerate() {
            if addrs.is_empty() {
                return bad(format!("site {site} lists no address"));
            }
            for addr in addrs {
                if !seen.insert(*addr) || taken.contains(addr) {
                    return bad(format!("address {addr} appears twice"));
                }
            }
        }
        Ok(())
    }

    pub fn node(&self, id: u32) -> Result<&NodeAddr, ConfigError> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or(ConfigError::UnknownNode(id))
    }

    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.iter().map(|n| NodeId(n.id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_round_trips_through_toml() {
        let config = ClusterConfig::local(3);
        let text = config.to_toml();
        assert_eq!(ClusterConfig::from_toml(&text, "x").unwrap(), config);
    }

    #[test]
    fn the_secret_file_is_read_and_bad_ones_are_clear_errors() {
        let dir = std::env::temp_dir().join(format!("roost-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, "00112233445566778899aabbccddeeff\n").unwrap();
        let security = SecurityConfig { secret_file: good };
        assert_eq!(security.load_secret().unwrap().len(), 16);
        let short = dir.join("short");
        std::fs::write(&short, "0011").unwrap();
        let error = SecurityConfig { secret_file: short }
            .load_secret()
            .unwrap_err();
        assert!(error.to_string().contains("cluster secret"), "{error}");
        let missing = SecurityConfig {
            secret_file: dir.join("missing"),
        };
        assert!(missing
            .load_secret()
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_coordinator_section_round_trips() {
        let mut config = ClusterConfig::local(2);
        config.coordinator = Some(CoordinatorConfig::etcd(vec!["127.0.0.1:2379".into()]));
        let text = config.to_toml();
        assert!(text.contains("etcd_endpoints"), "{text}");
        assert_eq!(ClusterConfig::from_toml(&text, "x").unwrap(), config);
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let cases = [
            ("", "node"),
            ("[[node]]\nid = 0\naddr = \"nope\"\nadmin_addr = \"127.0.0.1:1\"\n", "x"),
            (
                "[[node]]\nid = 0\naddr = \"127.0.0.1:1\"\nadmin_addr = \"127.0.0.1:2\"\n[[node]]\nid = 0\naddr = \"127.0.0.1:3\"\nadmin_addr = \"127.0.0.1:4\"\n",
                "twice",
            ),
            (
                "[[node]]\nid = 0\naddr = \"127.0.0.1:1\"\nadmin_addr = \"127.0.0.1:1\"\n",
                "twice",
            ),
            (
                "[membership]\nheartbeat_interval_ms = 500\nsuspect_after_ms = 100\nlease_duration_ms = 50\nclock_drift_margin_ms = 1\nproposal_timeout_ms = 900\n[[node]]\nid = 0\naddr = \"127.0.0.1:1\"\nadmin_addr = \"127.0.0.1:2\"\n",
                "heartbeat_interval_ms",
            ),
            ("[[node]]\nid = 0\nbogus = 1\n", "x"),
            (
                "[coordinator]\netcd_endpoints = []\n[[node]]\nid = 0\naddr = \"127.0.0.1:1\"\nadmin_addr = \"127.0.0.1:2\"\n",
                "etcd_endpoints",
            ),
        ];
        for (text, needle) in cases {
            let error = ClusterConfig::from_toml(text, "x").unwrap_err().to_string();
            assert!(error.contains(needle), "{error} should mention {needle}");
        }
    }

    #[test]
    fn a_geo_section_round_trips_and_bad_ones_are_clear_errors() {
        let node = "[[node]]\nid = 0\naddr = \"127.0.0.1:1\"\nadmin_addr = \"127.0.0.1:2\"\n";
        let good =
            format!("{node}[geo]\nsite = 1\nsites = [[\"127.0.0.1:10\"], [\"127.0.0.1:11\"]]\n");
        let config = ClusterConfig::from_toml(&good, "x").unwrap();
        let geo = config.geo.as_ref().unwrap();
        assert_eq!((geo.site, geo.sites.len()), (1, 2));
        assert_eq!(
            ClusterConfig::from_toml(&config.to_toml(), "x").unwrap(),
            config
        );
        let cases = [
            (
                "site = 2\nsites = [[\"127.0.0.1:10\"], [\"127.0.0.1:11\"]]",
                "site 2 of 2",
            ),
            (
                "site = 0\nsites = [[\"127.0.0.1:10\", \"127.0.0.1:12\"], [\"127.0.0.1:11\"]]",
                "one per [[node]]",
            ),
            (
                "site = 0\nsites = [[\"127.0.0.1:10\"], []]",
                "site 1 lists no address",
            ),
            (
                "site = 0\nsites = [[\"127.0.0.1:10\"], [\"127.0.0.1:10\"]]",
                "twice",
            ),
            ("site = 0\nsites = [[\"127.0.0.1:1\"]]", "twice"),
        ];
        for (geo, needle) in cases {
            let text = format!("{node}[geo]\n{geo}\n");
            let error = ClusterConfig::from_toml(&text, "x")
                .unwrap_err()
                .to_string();
            assert!(error.contains(needle), "{error} should mention {needle}");
        }
    }
}

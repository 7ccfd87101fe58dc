//! A site whose counters are rows of a RESP node's keyspace
//! ([`Design::Roost`](crate::Design::Roost) over [`Keyspace`]): procedures
//! (FCALL) update them inside their transactions, and on a Roost cluster the
//! keyspace replicates them to every node of the site by reliable commit, so
//! a site may be several nodes, each running the site's links over the same
//! rows (`roost resp --site` is a site of one node; a `roost node` with a
//! `[geo]` section is one node of a site that is a cluster).

use std::net::SocketAddr;
use std::sync::Arc;

use roost_resp::{Keyspace, SiteCounters, SiteRow};

use crate::error::EscrowError;
use crate::front_door::EscrowSiteCounters;
use crate::roost_store::{ReplicaRow, ReplicaRows, RowFuture};
use crate::site::{Site, SiteConfig};

impl ReplicaRows for Keyspace {
    fn load(&self, key: &str) -> RowFuture<'_, Result<Option<ReplicaRow>, String>> {
        let key = key.to_owned();
        Box::pin(async move {
            let row = self.site_row(&key).await?;
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
            self.site_row_cas(&key, expected.as_deref(), row).await
        })
    }

    fn keys(&self) -> RowFuture<'_, Result<Vec<String>, String>> {
        Box::pin(self.site_row_keys())
    }
}

/// A running site over a keyspace, and the BC.* counters its front door
/// serves.
pub struct KeyspaceSite {
    site: Site,
    counters: Arc<EscrowSiteCounters>,
}

impl KeyspaceSite {
    /// Starts node `config.member` of site `config.site`, its links on
    /// `listen`, its counters in `keyspace`. Call it on the runtime that is
    /// to run the site's tasks.
    pub async fn start(
        config: SiteConfig,
        listen: SocketAddr,
        keyspace: Keyspace,
    ) -> Result<KeyspaceSite, EscrowError> {
        let sites = config.sites;
        let listener =
            tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| EscrowError::Config {
                    reason: format!("listening for sites on {listen}: {e}"),
                })?;
        let site = Site::start_over_rows(config, listener, Arc::new(keyspace)).await?;
        let client = site.server_client().ok_or_else(|| EscrowError::Config {
            reason: "a keyspace site has a middleware node".to_owned(),
        })?;
        let counters = Arc::new(EscrowSiteCounters::new(client, sites)?);
        Ok(KeyspaceSite { site, counters })
    }

    /// What the front door's BC.* commands and procedures use.
    pub fn counters(&self) -> Arc<dyn SiteCounters> {
        Arc::clone(&self.counters) as Arc<dyn SiteCounters>
    }

    pub fn site(&self) -> &Site {
        &self.site
    }
}

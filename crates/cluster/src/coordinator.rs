//! The shell between a node and etcd: holds the node's lease and
//! registration, reads the view and the registrations every
//! `poll_interval_ms`, proposes the next view by compare-and-swap, and hands
//! each round's result to the node's driver as a [`CoordinatorUpdate`]. The
//! decisions live in [`crate::coordinated`]; this is only I/O and timing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use roost_net::{EpochId, NodeId};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::coordinated::{
    next_view, CoordinatorConfig, CoordinatorUpdate, Registered, Registration, StoredView,
    VIEW_HISTORY,
};
use crate::etcd::{EtcdClient, EtcdError, KeyValue};
use crate::membership::MAX_NODES;
use crate::protocol::{Incarnation, View};

/// Rounds that fail in a row before the shell logs at `warn` again.
const WARN_EVERY_FAILURES: u64 = 50;

/// A switch an operator or test flips to cut this node off from etcd (the
/// coordinator's share of the chaos layer): while set, no request is sent, so
/// the lease lapses exactly as in a real partition.
#[derive(Debug, Clone, Default)]
pub struct CoordinatorChaos(Arc<AtomicBool>);

impl CoordinatorChaos {
    pub fn set_cut(&self, cut: bool) {
        self.0.store(cut, Ordering::Relaxed);
    }

    pub fn is_cut(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The running shell (its updates go to the receiver [`spawn`] returns;
/// dropping that receiver also stops it).
pub struct CoordinatorHandle {
    pub chaos: CoordinatorChaos,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl CoordinatorHandle {
    /// Stops the shell and revokes the lease, so the others remove this node
    /// at once instead of after the TTL. Call after the node stopped serving.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

struct Shell {
    config: CoordinatorConfig,
    client: EtcdClient,
    me: NodeId,
    incarnation: Incarnation,
    addr: String,
    configured: Vec<NodeId>,
    /// The node's clock: `lease_expiry_ms` is on it.
    started: Instant,
    chaos: CoordinatorChaos,
    lease: Option<i64>,
    registered_with_lease: bool,
    lease_expiry_ms: u64,
    last_refresh_ms: u64,
    failures: u64,
    /// The newest epoch handed to the node.
    delivered_epoch: u64,
}

/// Starts the shell for node `me`; `started` is the node driver's clock origin.
pub fn spawn(
    config: CoordinatorConfig,
    me: NodeId,
    incarnation: Incarnation,
    addr: String,
    configured: Vec<NodeId>,
    started: Instant,
) -> Result<(CoordinatorHandle, mpsc::Receiver<CoordinatorUpdate>), EtcdError> {
    let client = EtcdClient::new(&config.etcd_endpoints, config.request_timeout_ms)?;
    let chaos = CoordinatorChaos::default();
    let (tx, updates) = mpsc::channel(4);
    let (stop, stop_rx) = oneshot::channel();
    let shell = Shell {
        config,
        client,
        me,
        incarnation,
        addr,
        configured,
        started,
        chaos: chaos.clone(),
        lease: None,
        registered_with_lease: false,
        lease_expiry_ms: 0,
        last_refresh_ms: 0,
        failures: 0,
        delivered_epoch: 0,
    };
    let task = tokio::spawn(shell.run(tx, stop_rx));
    let handle = CoordinatorHandle {
        chaos,
        stop: Some(stop),
        task,
    };
    Ok((handle, updates))
}

impl Shell {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    async fn run(mut self, tx: mpsc::Sender<CoordinatorUpdate>, mut stop: oneshot::Receiver<()>) {
        let poll = Duration::from_millis(self.config.poll_interval_ms);
        loop {
            let update = tokio::select! {
                biased;
                _ = &mut stop => break,
                update = self.round() => update,
            };
            if tx.send(update).await.is_err() {
                break;
            }
            tokio::select! {
                biased;
                _ = &mut stop => break,
                _ = tokio::time::sleep(poll) => {}
            }
        }
        if let Some(lease) = self.lease.take() {
            if let Err(error) = self.client.lease_revoke(lease).await {
                tracing::warn!(node = self.me.0, %error, "could not revoke the lease; it will expire");
            }
        }
    }

    /// One round: refresh the lease, read, maybe propose.
    async fn round(&mut self) -> CoordinatorUpdate {
        if self.chaos.is_cut() {
            return self.unreachable();
        }
        if let Err(error) = self.refresh_lease().await {
            self.failed("lease", &error);
            return self.unreachable();
        }
        // The registrations and the view, not the view history: under the
        // prefix, `nodes/` < `view` < `view\0` < `views/`.
        let from = self.config.key_prefix.as_bytes().to_vec();
        let mut to = self.config.view_key();
        to.push(0);
        let kvs = match self
            .client
            .range(&from, &to, 4 * MAX_NODES as u32 + 1)
            .await
        {
            Ok(kvs) => kvs,
            Err(error) => {
                self.failed("read", &error);
                return self.unreachable();
            }
        };
        let (mut view, view_revision, registered) = self.parse(&kvs);
        if self.now_ms() < self.lease_expiry_ms && self.registered_with_lease {
            let current = view.clone().unwrap_or_default();
            if let Some(next) = next_view(&current, &registered, &self.configured) {
                match self.propose(&next, view_revision).await {
                    Ok(true) => {
                        tracing::info!(
                            node = self.me.0,
                            epoch = next.epoch.0,
                            members = ?next.members.keys().map(|n| n.0).collect::<Vec<_>>(),
                            "proposed view chosen"
                        );
                        view = Some(next);
                    }
                    Ok(false) => {} // another node changed it first; next round reads it
                    Err(error) => self.failed("propose", &error),
                }
            }
        }
        self.failures = 0;
        let views = match view {
            Some(view) if view.epoch.0 > self.delivered_epoch => self.views_since(view).await,
            _ => Vec::new(),
        };
        if let Some(last) = views.last() {
            self.delivered_epoch = last.epoch.0;
        }
        CoordinatorUpdate {
            views,
            registered,
            lease_expiry_ms: self.lease_expiry_ms,
            reachable: true,
        }
    }

    fn unreachable(&self) -> CoordinatorUpdate {
        CoordinatorUpdate {
            views: Vec::new(),
            registered: Registered::new(),
            lease_expiry_ms: self.lease_expiry_ms,
            reachable: false,
        }
    }

    fn failed(&mut self, what: &str, error: &EtcdError) {
        if self.failures % WARN_EVERY_FAILURES == 0 {
            tracing::warn!(node = self.me.0, %error, "etcd {what} failed");
        }
        self.failures += 1;
    }

    /// Grants a lease (and registers) if there is none; refreshes it when due.
    /// The lease counts from when the request was *sent*, minus the drift
    /// margin: etcd counts from when it *arrived*, so ours lapses first.
    async fn refresh_lease(&mut self) -> Result<(), EtcdError> {
        let ttl_ms = |ttl_s: i64| (ttl_s.max(0) as u64).saturating_mul(1000);
        if let Some(id) = self.lease {
            let sent_ms = self.now_ms();
            if sent_ms >= self.last_refresh_ms + self.config.keepalive_interval_ms {
                match self.client.lease_keep_alive(id).await? {
                    Some(ttl_s) => self.set_expiry(sent_ms, ttl_ms(ttl_s)),
                    None => {
                        tracing::warn!(
                            node = self.me.0,
                            "etcd says the lease expired; granting a new one"
                        );
                        self.lease = None;
                    }
                }
            }
        }
        if self.lease.is_none() {
            let sent_ms = self.now_ms();
            let lease = self
                .client
                .lease_grant(self.config.lease_ttl_s as i64)
                .await?;
            self.lease = Some(lease.id);
            self.registered_with_lease = false;
            self.set_expiry(sent_ms, ttl_ms(lease.ttl_s));
        }
        if !self.registered_with_lease {
            let id = self.lease.expect("a lease was granted above");
            let registration = Registration {
                id: self.me.0,
                incarnation: self.incarnation,
                addr: self.addr.clone(),
            };
            let value = serde_json::to_vec(&registration).expect("a registration serializes");
            let key = self.config.registration_key(self.me, self.incarnation);
            if let Err(error) = self.client.put(&key, &value, id).await {
                // Most likely the lease expired between grant and put.
                self.lease = None;
                return Err(error);
            }
            self.registered_with_lease = true;
        }
        Ok(())
    }

    fn set_expiry(&mut self, sent_ms: u64, ttl_ms: u64) {
        self.last_refresh_ms = sent_ms;
        self.lease_expiry_ms = (sent_ms + ttl_ms).saturating_sub(self.config.clock_drift_margin_ms);
    }

    /// Chooses `next` if the view is still the one read (at
    /// `expected_revision`), recording it in the history and dropping the
    /// history entry `VIEW_HISTORY` epochs older, all in one transaction.
    async fn propose(&self, next: &View, expected_revision: i64) -> Result<bool, EtcdError> {
        let value = serde_json::to_vec(&StoredView::from(next)).expect("a view serializes");
        let view_key = self.config.view_key();
        let history_key = self.config.history_key(next.epoch);
        let puts = [(&view_key[..], &value[..]), (&history_key[..], &value[..])];
        let old = next
            .epoch
            .0
            .checked_sub(VIEW_HISTORY)
            .map(|e| self.config.history_key(EpochId(e)));
        let deletes: Vec<&[u8]> = old.iter().map(|k| &k[..]).collect();
        self.client
            .put_if_revision(&view_key, expected_revision, &puts, &deletes)
            .await
    }

    /// The views after the last one delivered, up to and including `current`,
    /// from the history (in order). If the history cannot be read or was
    /// pruned, only `current`.
    async fn views_since(&self, current: View) -> Vec<View> {
        let first = self.delivered_epoch + 1;
        if current.epoch.0 <= first {
            return vec![current];
        }
        let from = self.config.history_key(EpochId(first));
        let to = self.config.history_key(current.epoch);
        let missing = (current.epoch.0 - first).min(VIEW_HISTORY) as u32;
        let mut views: Vec<View> = match self.client.range(&from, &to, missing).await {
            Ok(kvs) => kvs
                .iter()
                .filter_map(|kv| serde_json::from_slice::<StoredView>(&kv.value).ok())
                .map(View::from)
                .filter(|v| v.epoch.0 >= first && v.epoch < current.epoch)
                .collect(),
            Err(error) => {
                tracing::debug!(node = self.me.0, %error, "view history unreadable; skipping to the current view");
                Vec::new()
            }
        };
        views.push(current);
        views
    }

    /// The view (with its revision, 0 if none) and the live registrations.
    /// Malformed entries (written by something else) are logged and skipped.
    fn parse(&self, kvs: &[KeyValue]) -> (Option<View>, i64, Registered) {
        let view_key = self.config.view_key();
        let nodes_prefix = self.config.nodes_prefix();
        let mut view = None;
        let mut revision = 0;
        let mut registered = Registered::new();
        for kv in kvs {
            if kv.key == view_key {
                match serde_json::from_slice::<StoredView>(&kv.value) {
                    Ok(stored) => {
                        view = Some(View::from(stored));
                        revision = kv.mod_revision;
                    }
                    Err(error) => {
                        tracing::warn!(node = self.me.0, %error, "malformed view in etcd");
                        // Keep its revision so a proposal can replace it.
                        revision = kv.mod_revision;
                    }
                }
            } else if kv.key.starts_with(&nodes_prefix) {
                match serde_json::from_slice::<Registration>(&kv.value) {
                    Ok(r) => {
                        registered
                            .entry(NodeId(r.id))
                            .or_default()
                            .insert(r.incarnation);
                    }
                    Err(error) => {
                        tracing::warn!(node = self.me.0, %error, "malformed registration in etcd")
                    }
                }
            }
        }
        (view, revision, registered)
    }
}

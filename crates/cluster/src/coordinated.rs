//! Membership decided by a consensus service (etcd), the production path for
//! multi-process clusters. This module is the sans-IO part: the state a node
//! keeps and the rule that picks the next view; [`crate::coordinator`] is the
//! shell that talks to etcd.
//!
//! **Leases.** Every node process holds an etcd lease (TTL `lease_ttl_s`) and
//! registers itself under `<prefix>nodes/<id>/<incarnation>` attached to it,
//! refreshing the lease every `keepalive_interval_ms`. On the node's own clock
//! the lease is valid until the *send* time of the last successful refresh
//! plus the TTL minus `clock_drift_margin_ms`; etcd expires it no earlier than
//! the refresh's *arrival* plus the TTL. So a node stops serving before etcd
//! deletes its registration.
//!
//! **Views.** The view (epoch and members with their incarnations) is one key,
//! `<prefix>view`, changed only by a compare-and-swap on its `mod_revision`,
//! so etcd (Raft underneath) orders every change and two nodes never install
//! different views for one epoch. Any node holding its lease may propose the
//! next view ([`next_view`]): the current members whose registration still
//! exists, plus registered configured nodes that are not members. A member is
//! dropped only once its registration is gone, which etcd does only when its
//! lease expired: a membership change is applied only after the leases of the
//! removed nodes have expired, as Zeus requires.
//!
//! **Restarts.** A restarted process is a new incarnation with a new key; the
//! view keeps the old incarnation until the old lease expires, then replaces
//! it, so a new incarnation never shares an epoch with its predecessor.

use std::collections::{BTreeMap, BTreeSet};

use roost_net::{EpochId, NodeId};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::membership::Health;
use crate::protocol::{Incarnation, View};

/// How a node reaches the consensus service, and the lease timing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorConfig {
    /// etcd client endpoints, `host:port`.
    pub etcd_endpoints: Vec<String>,
    /// Keys live under this prefix (one cluster per prefix).
    #[serde(default = "default_prefix")]
    pub key_prefix: String,
    #[serde(default = "default_ttl_s")]
    pub lease_ttl_s: u64,
    #[serde(default = "default_keepalive_ms")]
    pub keepalive_interval_ms: u64,
    /// How often a node reads the view and the registrations.
    #[serde(default = "default_poll_ms")]
    pub poll_interval_ms: u64,
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    #[serde(default = "default_drift_ms")]
    pub clock_drift_margin_ms: u64,
}

fn default_prefix() -> String {
    "/roost/".to_owned()
}
fn default_ttl_s() -> u64 {
    2
}
fn default_keepalive_ms() -> u64 {
    400
}
fn default_poll_ms() -> u64 {
    100
}
fn default_request_timeout_ms() -> u64 {
    300
}
fn default_drift_ms() -> u64 {
    50
}

impl CoordinatorConfig {
    pub fn etcd(endpoints: Vec<String>) -> Self {
        CoordinatorConfig {
            etcd_endpoints: endpoints,
            key_prefix: default_prefix(),
            lease_ttl_s: default_ttl_s(),
            keepalive_interval_ms: default_keepalive_ms(),
            poll_interval_ms: default_poll_ms(),
            request_timeout_ms: default_request_timeout_ms(),
            clock_drift_margin_ms: default_drift_ms(),
        }
    }

    pub fn validate(&self) -> Result<(), CoordinatorConfigError> {
        if self.etcd_endpoints.is_empty() || self.etcd_endpoints.iter().any(|e| e.is_empty()) {
            return Err(CoordinatorConfigError::NoEndpoints);
        }
        if !self.key_prefix.starts_with('/') || !self.key_prefix.ends_with('/') {
            return Err(CoordinatorConfigError::Prefix(self.key_prefix.clone()));
        }
        if !(1..=3600).contains(&self.lease_ttl_s) {
            return Err(CoordinatorConfigError::Ttl(self.lease_ttl_s));
        }
        let ttl_ms = self.lease_ttl_s * 1000;
        // Refreshes (each bounded by the request timeout) must fit in the
        // lease with room for the drift margin.
        if self.keepalive_interval_ms == 0
            || self.request_timeout_ms == 0
            || self.poll_interval_ms == 0
            || self.keepalive_interval_ms + self.request_timeout_ms + self.clock_drift_margin_ms
                >= ttl_ms
        {
            return Err(CoordinatorConfigError::Timing {
                keepalive_ms: self.keepalive_interval_ms,
                request_timeout_ms: self.request_timeout_ms,
                drift_ms: self.clock_drift_margin_ms,
                ttl_ms,
            });
        }
        Ok(())
    }

    pub fn view_key(&self) -> Vec<u8> {
        format!("{}view", self.key_prefix).into_bytes()
    }

    /// Every chosen view is also kept under its epoch, so a node that polled
    /// past some views still installs each one in order.
    pub fn history_key(&self, epoch: EpochId) -> Vec<u8> {
        format!("{}views/{:020}", self.key_prefix, epoch.0).into_bytes()
    }

    pub fn nodes_prefix(&self) -> Vec<u8> {
        format!("{}nodes/", self.key_prefix).into_bytes()
    }

    pub fn registration_key(&self, node: NodeId, incarnation: Incarnation) -> Vec<u8> {
        format!("{}nodes/{}/{}", self.key_prefix, node.0, incarnation).into_bytes()
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CoordinatorConfigError {
    #[error("coordinator: etcd_endpoints must list at least one host:port")]
    NoEndpoints,
    #[error("coordinator: key_prefix {0:?} must start and end with '/'")]
    Prefix(String),
    #[error("coordinator: lease_ttl_s {0} must be between 1 and 3600")]
    Ttl(u64),
    #[error(
        "coordinator: need 0 < keepalive_interval_ms ({keepalive_ms}) + request_timeout_ms \
         ({request_timeout_ms}) + clock_drift_margin_ms ({drift_ms}) < lease_ttl_s in ms ({ttl_ms}), \
         and poll_interval_ms > 0"
    )]
    Timing {
        keepalive_ms: u64,
        request_timeout_ms: u64,
        drift_ms: u64,
        ttl_ms: u64,
    },
}

/// What a node stores in its registration (for `roost status` and operators).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub id: u32,
    pub incarnation: Incarnation,
    pub addr: String,
}

/// The view as stored in etcd (JSON, so operators can read it with etcdctl).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredView {
    pub epoch: u64,
    pub members: Vec<(u32, Incarnation)>,
}

impl From<&View> for StoredView {
    fn from(view: &View) -> Self {
        StoredView {
            epoch: view.epoch.0,
            members: view.members.iter().map(|(n, &i)| (n.0, i)).collect(),
        }
    }
}

impl From<StoredView> for View {
    fn from(stored: StoredView) -> Self {
        View {
            epoch: EpochId(stored.epoch),
            members: stored
                .members
                .into_iter()
                .map(|(n, i)| (NodeId(n), i))
                .collect(),
        }
    }
}

/// Live registrations: node to its registered incarnations.
pub type Registered = BTreeMap<NodeId, BTreeSet<Incarnation>>;

/// The next view, if the registrations call for one: members keep their
/// incarnation while it is registered (its lease has not expired); a node that
/// is not a member (or whose member incarnation's lease expired) enters with
/// its newest registered incarnation. Only configured nodes are admitted. The
/// first view waits for a majority of the configured nodes: its members are
/// the ones protocols trust to hold all state from the start (nothing was
/// written before it), and later members recover from a majority of them.
pub fn next_view(current: &View, registered: &Registered, configured: &[NodeId]) -> Option<View> {
    let mut members = BTreeMap::new();
    for &node in configured {
        let Some(incarnations) = registered.get(&node) else {
            continue;
        };
        let chosen = match current.members.get(&node) {
            Some(inc) if incarnations.contains(inc) => *inc,
            _ => match incarnations.last() {
                Some(&newest) => newest,
                None => continue,
            },
        };
        members.insert(node, chosen);
    }
    if members == current.members {
        return None;
    }
    if current.epoch == EpochId(0) && members.len() < configured.len() / 2 + 1 {
        return None;
    }
    Some(View {
        epoch: EpochId(current.epoch.0 + 1),
        members,
    })
}

/// Views kept in etcd's history; older ones are deleted as new ones are chosen.
pub const VIEW_HISTORY: u64 = 128;

/// What the coordinator shell reports to the node after each round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorUpdate {
    /// Views chosen since the last round, in epoch order, ending with the one
    /// etcd holds now (empty: nothing new, none chosen yet, or unreachable).
    pub views: Vec<View>,
    pub registered: Registered,
    /// This node's lease is valid until then, on the node's clock (0: none).
    pub lease_expiry_ms: u64,
    /// The round reached etcd.
    pub reachable: bool,
}

/// One node's membership state under a consensus service (sans-IO).
#[derive(Debug, Clone)]
pub struct CoordinatedMembership {
    me: NodeId,
    incarnation: Incarnation,
    nodes: Vec<NodeId>,
    view: View,
    registered: Registered,
    lease_expiry_ms: u64,
}

impl CoordinatedMembership {
    pub fn new(me: NodeId, incarnation: Incarnation, nodes: &[NodeId]) -> Self {
        assert!(nodes.contains(&me), "{me} is not in the configuration");
        let mut nodes = nodes.to_vec();
        nodes.sort_unstable();
        nodes.dedup();
        CoordinatedMembership {
            me,
            incarnation,
            nodes,
            view: View::default(),
            registered: Registered::new(),
            lease_expiry_ms: 0,
        }
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    pub fn is_member(&self) -> bool {
        self.view.contains(self.me, self.incarnation)
    }

    pub fn lease_expiry_ms(&self) -> u64 {
        if self.is_member() {
            self.lease_expiry_ms
        } else {
            0
        }
    }

    pub fn serving(&self, now_ms: u64) -> bool {
        now_ms < self.lease_expiry_ms()
    }

    /// Applies a round's lease and registrations.
    pub fn on_update(&mut self, update: &CoordinatorUpdate) {
        self.lease_expiry_ms = update.lease_expiry_ms;
        if update.reachable {
            self.registered = update.registered.clone();
        }
    }

    /// Installs `view` if it is newer; views only move forward (an older one,
    /// from a stale read, is ignored). True if installed.
    pub fn install(&mut self, view: View) -> bool {
        if view.epoch > self.view.epoch {
            self.view = view;
            true
        } else {
            false
        }
    }

    /// Live: registered (its lease is held). Suspect: a member whose
    /// registration is gone (lease expired, view not yet changed). Dead:
    /// neither.
    pub fn health(&self, node: NodeId, now_ms: u64) -> Health {
        if node == self.me {
            return if self.serving(now_ms) {
                Health::Live
            } else {
                Health::Suspect
            };
        }
        let registered = self.registered.get(&node).is_some_and(|s| !s.is_empty());
        match (registered, self.view.members.contains_key(&node)) {
            (true, _) => Health::Live,
            (false, true) => Health::Suspect,
            (false, false) => Health::Dead,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(epoch: u64, members: &[(u32, u64)]) -> View {
        View {
            epoch: EpochId(epoch),
            members: members.iter().map(|&(n, i)| (NodeId(n), i)).collect(),
        }
    }

    fn registered(entries: &[(u32, u64)]) -> Registered {
        let mut r = Registered::new();
        for &(n, i) in entries {
            r.entry(NodeId(n)).or_default().insert(i);
        }
        r
    }

    const NODES: [NodeId; 3] = [NodeId(0), NodeId(1), NodeId(2)];

    #[test]
    fn the_first_view_waits_for_a_majority_and_admits_every_registered_node() {
        assert_eq!(
            next_view(&View::default(), &registered(&[(0, 5)]), &NODES),
            None
        );
        let next = next_view(&View::default(), &registered(&[(0, 5), (2, 7)]), &NODES).unwrap();
        assert_eq!(next, view(1, &[(0, 5), (2, 7)]));
    }

    #[test]
    fn no_change_no_view() {
        let current = view(3, &[(0, 5), (1, 6)]);
        assert_eq!(
            next_view(&current, &registered(&[(0, 5), (1, 6)]), &NODES),
            None
        );
    }

    #[test]
    fn a_member_stays_while_its_registration_lives() {
        // Node 1 restarted (incarnation 9) while its old lease (6) still runs:
        // the view keeps 6 until that registration is gone.
        let current = view(3, &[(0, 5), (1, 6)]);
        assert_eq!(
            next_view(&current, &registered(&[(0, 5), (1, 6), (1, 9)]), &NODES),
            None
        );
        let next = next_view(&current, &registered(&[(0, 5), (1, 9)]), &NODES).unwrap();
        assert_eq!(next, view(4, &[(0, 5), (1, 9)]));
    }

    #[test]
    fn an_expired_member_is_removed_and_strangers_are_not_admitted() {
        let current = view(3, &[(0, 5), (1, 6)]);
        let next = next_view(&current, &registered(&[(0, 5), (7, 1)]), &NODES).unwrap();
        assert_eq!(next, view(4, &[(0, 5)]));
    }

    #[test]
    fn views_only_move_forward_and_serving_needs_membership_and_lease() {
        let mut m = CoordinatedMembership::new(NodeId(0), 5, &NODES);
        let update = |lease: u64| CoordinatorUpdate {
            views: Vec::new(),
            registered: registered(&[(0, 5)]),
            lease_expiry_ms: lease,
            reachable: true,
        };
        m.on_update(&update(1000));
        assert!(!m.serving(10), "not a member yet");
        assert!(m.install(view(2, &[(0, 5)])));
        assert!(m.serving(10));
        assert!(!m.serving(1000), "lease lapsed");
        assert!(!m.install(view(1, &[(0, 5), (1, 1)])));
        assert_eq!(m.view().epoch, EpochId(2));
        m.on_update(&update(2000));
        assert!(m.install(view(3, &[(1, 1)])));
        assert!(!m.serving(10), "removed from the view");
        assert_eq!(m.health(NodeId(1), 10), Health::Suspect);
        assert_eq!(m.health(NodeId(2), 10), Health::Dead);
    }

    #[test]
    fn config_timing_is_validated() {
        let mut c = CoordinatorConfig::etcd(vec!["127.0.0.1:2379".into()]);
        assert_eq!(c.validate(), Ok(()));
        c.keepalive_interval_ms = 1900;
        assert!(matches!(
            c.validate(),
            Err(CoordinatorConfigError::Timing { .. })
        ));
        c.keepalive_interval_ms = 400;
        c.key_prefix = "roost".into();
        assert!(matches!(
            c.validate(),
            Err(CoordinatorConfigError::Prefix(_))
        ));
        c.key_prefix = "/r/".into();
        c.etcd_endpoints.clear();
        assert_eq!(c.validate(), Err(CoordinatorConfigError::NoEndpoints));
    }
}

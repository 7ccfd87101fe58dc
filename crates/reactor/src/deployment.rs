//! Deployment configuration (TOML): containers and their executors, the
//! placement of reactors on containers, the router policy. The same
//! application runs shared-everything, shared-nothing or in between by
//! changing this file only.
//!
//! ```toml
//! max_active_transactions = 64      # per executor
//! spin_before_park_us = 50          # an idle executor's spin before it parks
//! spin_while_active_us = 1000       # the same while a transaction is in flight here
//! router = "round-robin"            # or "affinity"
//! mailbox_capacity = 1024           # jobs queued per executor before senders wait
//!
//! [[containers]]
//! name = "carts"
//! executors = 1
//!
//! [[containers]]
//! name = "sections"
//! executors = 1
//!
//! [placement]
//! default = "carts"                          # unmatched reactors
//! by_type = { store_section = "sections" }   # every reactor of a type
//! by_name = { "section-0" = "carts" }        # one reactor (wins over the rest)
//! by_hash = { customer = ["carts", "sections"] }  # a type spread by name hash
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::DeploymentError;
use crate::schema::Schema;

const MAX_EXECUTORS_PER_CONTAINER: usize = 64;
const MAX_ACTIVE_TRANSACTIONS: usize = 65_536;
const DEFAULT_SPIN_BEFORE_PARK_US: u64 = 50;
const DEFAULT_SPIN_WHILE_ACTIVE_US: u64 = 1_000;
const MAX_SPIN_BEFORE_PARK_US: u64 = 10_000;
/// Jobs (root transactions, calls from other containers, context releases)
/// an executor's mailbox holds before their senders wait: enough for every
/// admitted transaction of a few executors to have calls queued, small
/// enough that a flood of clients queues in their own tasks (and sockets),
/// not in the executor.
pub const DEFAULT_MAILBOX_CAPACITY: usize = 1024;
const MAX_MAILBOX_CAPACITY: usize = 1 << 20;

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    pub name: String,
    #[serde(default = "one")]
    pub executors: usize,
}

fn one() -> usize {
    1
}

fn default_active() -> usize {
    64
}

fn default_mailbox() -> usize {
    DEFAULT_MAILBOX_CAPACITY
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PlacementSpec {
    pub default: Option<String>,
    #[serde(default)]
    pub by_type: BTreeMap<String, String>,
    #[serde(default)]
    pub by_name: BTreeMap<String, String>,
    #[serde(default)]
    pub by_hash: BTreeMap<String, Vec<String>>,
}

/// How the router picks one of a container's executors for a root transaction.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RouterPolicy {
    /// Rotate over the container's executors.
    #[default]
    RoundRobin,
    /// Always the same executor for the same reactor.
    Affinity,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    pub containers: Vec<ContainerSpec>,
    #[serde(default)]
    pub placement: PlacementSpec,
    #[serde(default)]
    pub router: RouterPolicy,
    /// Root transactions an executor runs at once (admission control).
    #[serde(default = "default_active")]
    pub max_active_transactions: usize,
    /// Jobs an executor's mailbox holds (1..=1048576, default
    /// [`DEFAULT_MAILBOX_CAPACITY`]). A full mailbox makes its senders wait:
    /// [`Database::run`](crate::Database::run) awaits room (and
    /// `run_blocking` blocks), and a call or release from another executor
    /// waits in a task of the sending executor, never in the mailbox.
    #[serde(default = "default_mailbox")]
    pub mailbox_capacity: usize,
    /// How long an idle executor spins looking for work before it parks its
    /// thread (waking a parked thread costs tens of microseconds). Default
    /// 50 us. With more executors than cores the spin yields the core between
    /// checks, so executors with work are not starved.
    #[serde(default)]
    pub spin_before_park_us: Option<u64>,
    /// The spin budget of an executor that serves a transaction still in
    /// flight (its context here is not yet released): the transaction's next
    /// call or its commit is due soon, and catching it without a wake-up
    /// saves a parked thread's wake-up per call. Default 1000 us.
    #[serde(default)]
    pub spin_while_active_us: Option<u64>,
}

impl Deployment {
    pub fn from_toml(text: &str) -> Result<Self, DeploymentError> {
        toml::from_str(text).map_err(|e| DeploymentError::Toml(e.to_string()))
    }

    /// Everything in one container with `executors` executors.
    pub fn shared_everything(executors: usize) -> Self {
        Deployment {
            containers: vec![ContainerSpec {
                name: "main".into(),
                executors,
            }],
            placement: PlacementSpec::default(),
            router: RouterPolicy::RoundRobin,
            max_active_transactions: default_active(),
            mailbox_capacity: default_mailbox(),
            spin_before_park_us: None,
            spin_while_active_us: None,
        }
    }

    /// The spin budget in effect (see `spin_before_park_us`).
    pub fn spin_before_park_us(&self) -> u64 {
        self.spin_before_park_us
            .unwrap_or(DEFAULT_SPIN_BEFORE_PARK_US)
    }

    /// The spin budget in effect while a transaction is in flight (see
    /// `spin_while_active_us`).
    pub fn spin_while_active_us(&self) -> u64 {
        self.spin_while_active_us
            .unwrap_or(DEFAULT_SPIN_WHILE_ACTIVE_US)
    }

    /// Whether spinning executors must yield their core between checks:
    /// when executors outnumber cores, a pure spin would take a core from an
    /// executor with work.
    pub fn spin_yields(&self) -> bool {
        let executors: usize = self.containers.iter().map(|c| c.executors).sum();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        executors > cores
    }

    /// Checks the deployment against `schema` ([`crate::Database::new`] runs
    /// it): containers, executor counts, limits, and that placement names
    /// only known containers and reactor types.
    pub fn validate(&self, schema: &Schema) -> Result<(), DeploymentError> {
        if self.containers.is_empty() {
            return Err(DeploymentError::NoContainers);
        }
        if self.containers.len() > crate::database::MAX_CONTAINERS {
            return Err(DeploymentError::TooManyContainers(self.containers.len()));
        }
        for (i, c) in self.containers.iter().enumerate() {
            if self.containers[..i].iter().any(|o| o.name == c.name) {
                return Err(DeploymentError::DuplicateContainer(c.name.clone()));
            }
            if c.executors == 0 || c.executors > MAX_EXECUTORS_PER_CONTAINER {
                return Err(DeploymentError::BadExecutorCount {
                    container: c.name.clone(),
                    executors: c.executors,
                });
            }
        }
        if self.max_active_transactions == 0
            || self.max_active_transactions > MAX_ACTIVE_TRANSACTIONS
        {
            return Err(DeploymentError::BadActiveLimit(
                self.max_active_transactions,
            ));
        }
        if self.mailbox_capacity == 0 || self.mailbox_capacity > MAX_MAILBOX_CAPACITY {
            return Err(DeploymentError::BadMailbox(self.mailbox_capacity));
        }
        if let Some(us) = [self.spin_before_park_us, self.spin_while_active_us]
            .into_iter()
            .flatten()
            .find(|&us| us > MAX_SPIN_BEFORE_PARK_US)
        {
            return Err(DeploymentError::BadSpin(us));
        }
        let p = &self.placement;
        let named = p
            .default
            .iter()
            .chain(p.by_type.values())
            .chain(p.by_name.values())
            .chain(p.by_hash.values().flatten());
        for name in named {
            self.container_index(name)?;
        }
        for reactor_type in p.by_type.keys().chain(p.by_hash.keys()) {
            if !schema.has_reactor_type(reactor_type) {
                return Err(DeploymentError::UnknownReactorType(reactor_type.clone()));
            }
        }
        if p.by_hash.values().any(Vec::is_empty) {
            return Err(DeploymentError::UnknownContainer(
                "(empty by_hash list)".into(),
            ));
        }
        Ok(())
    }

    fn container_index(&self, name: &str) -> Result<usize, DeploymentError> {
        self.containers
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| DeploymentError::UnknownContainer(name.to_owned()))
    }

    /// The container a reactor is placed in: by name, else by hash of its
    /// name over its type's list, else by type, else the default (or the first).
    /// Only for a deployment that passed [`validate`](Self::validate).
    pub fn place(&self, reactor_name: &str, reactor_type: &str) -> usize {
        let p = &self.placement;
        let pick = |name: &String| self.container_index(name).expect("validated");
        if let Some(c) = p.by_name.get(reactor_name) {
            return pick(c);
        }
        if let Some(list) = p.by_hash.get(reactor_type) {
            let slot = (fnv1a(reactor_name.as_bytes()) % list.len() as u64) as usize;
            return pick(&list[slot]);
        }
        if let Some(c) = p.by_type.get(reactor_type) {
            return pick(c);
        }
        p.default.as_ref().map_or(0, pick)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_toml_is_an_error() {
        assert!(matches!(
            Deployment::from_toml("containers = 3"),
            Err(DeploymentError::Toml(_))
        ));
        assert!(matches!(
            Deployment::from_toml("[[containers]]\nname = \"a\"\nbogus = 1"),
            Err(DeploymentError::Toml(_))
        ));
    }

    #[test]
    fn spins_default_and_are_bounded() {
        let d = Deployment::from_toml("[[containers]]\nname = \"a\"").unwrap();
        assert_eq!(d.spin_before_park_us(), DEFAULT_SPIN_BEFORE_PARK_US);
        assert_eq!(d.spin_while_active_us(), DEFAULT_SPIN_WHILE_ACTIVE_US);
        let schema = Schema::new();
        let too_long =
            Deployment::from_toml("spin_while_active_us = 20000\n[[containers]]\nname = \"a\"")
                .unwrap();
        assert_eq!(
            too_long.validate(&schema),
            Err(DeploymentError::BadSpin(20_000))
        );
    }

    #[test]
    fn placement_rules_in_order() {
        let d = Deployment::from_toml(
            r#"
            [[containers]]
            name = "a"
            [[containers]]
            name = "b"
            executors = 2
            [placement]
            default = "b"
            by_type = { t = "a" }
            by_name = { special = "b" }
            "#,
        )
        .unwrap();
        assert_eq!(d.place("x", "t"), 0);
        assert_eq!(d.place("special", "t"), 1);
        assert_eq!(d.place("x", "other"), 1);
    }
}

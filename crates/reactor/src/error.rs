//! Errors of the reactor layer.

use thiserror::Error;

pub use roost_storage::TxError;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SchemaError {
    #[error("reactor type `{0}` declared twice")]
    DuplicateReactorType(&'static str),
    #[error("relation `{relation}` of reactor type `{reactor_type}` declared twice")]
    DuplicateRelation {
        reactor_type: &'static str,
        relation: &'static str,
    },
    #[error(
        "relation `{relation}` belongs to `{declared_for}` but is listed under `{listed_under}`"
    )]
    WrongReactorType {
        relation: &'static str,
        declared_for: &'static str,
        listed_under: &'static str,
    },
    #[error(
        "relation `{relation}` already has index {existing} in another schema (wanted {wanted})"
    )]
    ConflictingIndex {
        relation: &'static str,
        existing: u32,
        wanted: u32,
    },
    #[error("relation `{relation}` of `{reactor_type}` is not in the database's schema")]
    UndeclaredRelation {
        reactor_type: &'static str,
        relation: &'static str,
    },
}

/// Errors in a deployment configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeploymentError {
    #[error("deployment TOML: {0}")]
    Toml(String),
    #[error("deployment has no containers")]
    NoContainers,
    #[error("container `{0}` declared twice")]
    DuplicateContainer(String),
    #[error("container `{container}` needs 1..=64 executors, got {executors}")]
    BadExecutorCount { container: String, executors: usize },
    #[error("placement names unknown container `{0}`")]
    UnknownContainer(String),
    #[error("placement names unknown reactor type `{0}`")]
    UnknownReactorType(String),
    #[error("max_active_transactions must be 1..=65536, got {0}")]
    BadActiveLimit(usize),
    #[error("spin_before_park_us must be at most 10000, got {0}")]
    BadSpin(u64),
    #[error("mailbox_capacity must be 1..=1048576, got {0}")]
    BadMailbox(usize),
    /// The OS refused an executor's thread or its poll (`io::Error` as text:
    /// this enum is `Clone` and `Eq`).
    #[error("cannot start executor {executor}: {reason}")]
    ExecutorStart { executor: usize, reason: String },
}

/// Errors of the reactor directory.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DirectoryError {
    #[error("reactor `{0}` already exists")]
    AlreadyExists(String),
    #[error("no reactor named `{0}`")]
    NoSuchReactor(String),
    #[error("unknown reactor type `{0}`")]
    UnknownReactorType(String),
    #[error("reactor names must be 1..=256 bytes")]
    BadName,
    #[error("no container named `{0}`")]
    NoSuchContainer(String),
    #[error("the directory is full ({0} reactors)")]
    Full(usize),
}

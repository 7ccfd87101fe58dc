//! Errors of the reactor layer.

use thiserror::Error;

pub use roost_storage::TxError;

use crate::placement::ReactorKey;
use crate::txn::ReactorError;

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
    #[error("deployment has {0} containers; at most 32768")]
    TooManyContainers(usize),
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
    #[error("reactor `{name}` exists here with type `{existing}`")]
    TypeMismatch {
        name: String,
        existing: &'static str,
    },
    #[error("reactor `{0}` does not live in this database")]
    NotLocal(String),
    #[error("the placement does not put reactor `{0}` in this database")]
    NotPlacedHere(String),
}

/// Errors of [`Database::export_reactor`](crate::Database::export_reactor).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExportError {
    #[error(transparent)]
    Directory(#[from] DirectoryError),
    #[error("a move, export or install of the reactor is in progress")]
    Busy,
    /// The extracting transaction failed (retries exhausted, shutdown).
    #[error("export transaction: {0}")]
    Transaction(ReactorError),
    #[error("reactor {0} is not frozen here (freeze_reactor first)")]
    NotFrozen(crate::placement::ReactorKey),
}

/// Errors of the replica operations of a [`Database`](crate::Database)
/// (`apply_to_replica`, `set_replica_readable`, `promote_replica`,
/// `demote_to_replica`, `drop_replica`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplicaError {
    #[error(transparent)]
    Directory(#[from] DirectoryError),
    #[error("reactor `{0}` is not a replica here")]
    NotReplica(crate::placement::ReactorKey),
    #[error("reactor `{0}` is not writable here")]
    NotOwned(crate::placement::ReactorKey),
    #[error("a move, export, install or apply of the reactor is in progress")]
    Busy,
    #[error("reactor type `{reactor_type}` has no relation `{relation}` in this schema")]
    UnknownRelation {
        reactor_type: String,
        relation: String,
    },
    /// The applying transaction failed (retries exhausted, shutdown).
    #[error("replica transaction: {0}")]
    Transaction(ReactorError),
}

/// Errors of [`Database::install_reactor`](crate::Database::install_reactor).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InstallError {
    #[error(transparent)]
    Directory(#[from] DirectoryError),
    #[error("exported rows do not decode: {0}")]
    Malformed(String),
    #[error("reactor type `{reactor_type}` has no relation `{relation}` in this schema")]
    UnknownRelation {
        reactor_type: String,
        relation: String,
    },
    #[error("the placement does not put reactor `{0}` in this database")]
    NotPlacedHere(ReactorKey),
    #[error("reactor `{0}` already lives in this database")]
    AlreadyLocal(ReactorKey),
    #[error("stale export: this database had placement version {have}, the export has {got}")]
    Stale { have: u64, got: u64 },
    #[error("a move, export or install of the reactor is in progress")]
    Busy,
    /// The installing transaction failed (retries exhausted, shutdown).
    #[error("install transaction: {0}")]
    Transaction(ReactorError),
}

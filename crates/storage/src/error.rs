//! Errors of the transaction API: one enum per kind of operation.

use thiserror::Error;

/// Why optimistic validation failed. Every conflict is worth retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ConflictKind {
    #[error("a record read by the transaction changed or was locked before commit")]
    ReadValidation,
    #[error("a scanned range or a key read as missing gained or lost records (phantom)")]
    Phantom,
    #[error("a written record was unlinked by a concurrent delete")]
    RecordUnlinked,
}

/// Integrity constraints the engine itself enforces.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConstraintViolation {
    #[error("insert of a key that already exists in relation `{relation}`")]
    DuplicateKey { relation: String },
    #[error("update of a key that does not exist in relation `{relation}`")]
    MissingKey { relation: String },
}

/// Errors of operations inside a transaction (`get`, `put`, `scan`, ... and the
/// retry helper).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TxError {
    #[error("transaction conflict: {0}")]
    Conflict(ConflictKind),
    #[error("aborted by the application: {reason}")]
    UserAbort { reason: String },
    #[error("constraint violated: {0}")]
    Constraint(ConstraintViolation),
    #[error("key of {len} bytes exceeds the {max}-byte limit")]
    KeyTooLarge { len: usize, max: usize },
    #[error("value of {len} bytes exceeds the {max}-byte limit")]
    ValueTooLarge { len: usize, max: usize },
    #[error("transaction wrote more than {max} bytes of keys and values")]
    TransactionTooLarge { max: usize },
    #[error("value codec: {0}")]
    Codec(String),
    #[error("relation `{relation}` is hash-indexed: it has no order to scan")]
    ScanOfHashedRelation { relation: String },
    #[error(
        "relation `{relation}` is not a partitioned hashed relation: it has no partitions to list"
    )]
    NotPartitioned { relation: String },
    #[error("gave up after {attempts} attempts; last conflict: {last}")]
    RetriesExhausted { attempts: u32, last: ConflictKind },
}

impl TxError {
    /// Conflicts are transient: the same transaction may succeed when re-run.
    pub fn is_retryable(&self) -> bool {
        matches!(self, TxError::Conflict(_))
    }

    pub fn user_abort(reason: impl Into<String>) -> Self {
        TxError::UserAbort {
            reason: reason.into(),
        }
    }
}

/// The error of `commit`: validation failed and the transaction was aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CommitError {
    #[error("commit aborted: {0}")]
    Conflict(ConflictKind),
}

impl From<CommitError> for TxError {
    fn from(e: CommitError) -> Self {
        match e {
            CommitError::Conflict(kind) => TxError::Conflict(kind),
        }
    }
}

/// Errors of the relation catalog.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CatalogError {
    #[error("relation `{0}` already exists")]
    AlreadyExists(String),
    #[error("relation name must be 1..=128 bytes, got {0} bytes")]
    BadName(usize),
}

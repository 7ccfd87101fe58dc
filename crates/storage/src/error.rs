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

/// A conflict: why, and where the engine knows it, which record: its
/// relation and key (the key of a record met by a scan is not kept: the
/// scan's relation is named alone). What a user needs to find a hot key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub kind: ConflictKind,
    pub at: Option<Box<ConflictAt>>,
}

/// The record a conflict was found at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictAt {
    pub relation: String,
    /// The reactor whose row it is (the reactor layer fills it in: its
    /// keys start with the reactor's id).
    pub reactor: Option<u64>,
    /// That reactor's name, where the reactor layer could tell it.
    pub reactor_name: Option<String>,
    /// The key, as stored (after the reactor's id, where that is known).
    pub key: Option<Vec<u8>>,
}

impl Conflict {
    pub fn at(kind: ConflictKind, relation: &str, key: Option<&[u8]>) -> Conflict {
        Conflict {
            kind,
            at: Some(Box::new(ConflictAt {
                relation: relation.to_owned(),
                reactor: None,
                reactor_name: None,
                key: key.map(<[u8]>::to_vec),
            })),
        }
    }
}

impl From<ConflictKind> for Conflict {
    fn from(kind: ConflictKind) -> Conflict {
        Conflict { kind, at: None }
    }
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind)?;
        let Some(at) = &self.at else {
            return Ok(());
        };
        write!(f, " (relation `{}`", at.relation)?;
        match (&at.reactor_name, at.reactor) {
            (Some(name), _) => write!(f, ", reactor `{name}`")?,
            (None, Some(id)) => write!(f, ", reactor #{id}")?,
            (None, None) => {}
        }
        if let Some(key) = &at.key {
            write!(f, ", key \"{}\"", key.escape_ascii())?;
        }
        write!(f, ")")
    }
}

impl std::error::Error for Conflict {}

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
    Conflict(Conflict),
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
    RetriesExhausted { attempts: u32, last: Conflict },
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
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CommitError {
    #[error("commit aborted: {0}")]
    Conflict(Conflict),
}

impl From<CommitError> for TxError {
    fn from(e: CommitError) -> Self {
        match e {
            CommitError::Conflict(conflict) => TxError::Conflict(conflict),
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

//! Errors of the middleware. Outcomes of the paper's API (`fail`, `retry`)
//! are not errors: they are [`Outcome`](crate::Outcome)s. An
//! [`EscrowError`] means the operation could not be decided: the store is
//! unreachable, what it holds is not a counter state, or the input is bad.

use thiserror::Error;

/// Why an operation could not be decided.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EscrowError {
    #[error(
        "counter `{key}` does not exist at this site (create it, or wait until it replicates)"
    )]
    UnknownCounter { key: String },
    #[error(
        "counter `{key}` exists with a different definition ({existing}); asked for {requested}"
    )]
    Conflict {
        key: String,
        existing: String,
        requested: String,
    },
    #[error("invalid key: {reason}")]
    InvalidKey { reason: String },
    #[error("redis at this site failed: {reason}")]
    Redis { reason: String },
    #[error("the Roost store at this site failed: {reason}")]
    Roost { reason: String },
    #[error("the state of counter `{key}` in redis is not a valid counter state: {reason}")]
    CorruptState { key: String, reason: String },
    #[error("counter `{key}`: {reason}")]
    Counter { key: String, reason: String },
    #[error("gave up on counter `{key}` after {attempts} conflicting conditional writes")]
    Contention { key: String, attempts: u32 },
    #[error("bad configuration: {reason}")]
    Config { reason: String },
    #[error("the site's front door (RESP) failed or refused: {reason}")]
    FrontDoor { reason: String },
    #[error("the middleware node of this site is gone")]
    NodeGone,
    #[error("counter `{key}`: its command queue is full ({capacity} commands); retry later")]
    QueueFull { key: String, capacity: usize },
}

impl EscrowError {
    pub(crate) fn redis(error: &redis::RedisError) -> EscrowError {
        EscrowError::Redis {
            reason: error.to_string(),
        }
    }

    pub(crate) fn counter(key: &str, reason: impl std::fmt::Display) -> EscrowError {
        EscrowError::Counter {
            key: key.to_owned(),
            reason: reason.to_string(),
        }
    }
}

impl From<redis::RedisError> for EscrowError {
    fn from(error: redis::RedisError) -> EscrowError {
        EscrowError::redis(&error)
    }
}

/// The longest key the middleware accepts.
pub const MAX_KEY_BYTES: usize = 512;

/// Keys are opaque, non-empty, at most [`MAX_KEY_BYTES`] bytes, and without
/// control characters (the Weak baseline's replication log separates fields
/// with a tab).
pub fn check_key(key: &str) -> Result<(), EscrowError> {
    if key.is_empty() {
        return Err(EscrowError::InvalidKey {
            reason: "empty".to_owned(),
        });
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(EscrowError::InvalidKey {
            reason: format!("{} bytes, the limit is {MAX_KEY_BYTES}", key.len()),
        });
    }
    if key.chars().any(char::is_control) {
        return Err(EscrowError::InvalidKey {
            reason: "contains a control character".to_owned(),
        });
    }
    Ok(())
}

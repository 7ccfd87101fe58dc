//! When the log makes appended records durable.

use std::fmt;
use std::str::FromStr;

use crate::error::ParseSyncPolicyError;

/// The bounds of `every <ms>`: at least one millisecond, at most a minute
/// (a longer window would lose more than any operator means to).
pub const SYNC_INTERVAL_MS_MIN: u64 = 1;
pub const SYNC_INTERVAL_MS_MAX: u64 = 60_000;

/// When `Log::commit` makes records durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Every commit waits for an fdatasync covering its records (shared
    /// with concurrent commits: group commit).
    #[default]
    Always,
    /// A background thread syncs every this many milliseconds; a commit
    /// does not wait (a crash loses at most about one interval).
    EveryMs(u64),
    /// Never sync except when a segment is sealed and at close (the OS
    /// writes back when it likes).
    Off,
}

impl SyncPolicy {
    /// The interval of `EveryMs`, if it is in range.
    pub(crate) fn validate(self) -> Result<(), &'static str> {
        match self {
            SyncPolicy::EveryMs(ms)
                if !(SYNC_INTERVAL_MS_MIN..=SYNC_INTERVAL_MS_MAX).contains(&ms) =>
            {
                Err("the sync interval must be from 1 to 60000 ms")
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Display for SyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncPolicy::Always => f.write_str("always"),
            SyncPolicy::EveryMs(ms) => write!(f, "every {ms}"),
            SyncPolicy::Off => f.write_str("off"),
        }
    }
}

impl FromStr for SyncPolicy {
    type Err = ParseSyncPolicyError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParseSyncPolicyError {
            input: input.to_string(),
            reason,
        };
        let s = input.trim().to_ascii_lowercase();
        match s.as_str() {
            "always" => return Ok(SyncPolicy::Always),
            "off" => return Ok(SyncPolicy::Off),
            _ => {}
        }
        let Some(rest) = s.strip_prefix("every") else {
            return Err(err("unknown policy"));
        };
        // "every 1000", "every:1000", "every=1000" (one separator, then digits).
        let digits = match rest.chars().next() {
            Some(' ' | ':' | '=') => rest[1..].trim(),
            _ => return Err(err("\"every\" needs a separator and an interval in ms")),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err("the interval is not a whole number of milliseconds"));
        }
        let ms: u64 = digits
            .parse()
            .map_err(|_| err("the interval is out of range"))?;
        let policy = SyncPolicy::EveryMs(ms);
        policy.validate().map_err(err)?;
        Ok(policy)
    }
}

//! One error enum per operation. Every message names the file (and the
//! byte offset) or the directory it is about.

use std::io;
use std::path::PathBuf;

/// Why a file's bytes cannot be what the log wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Corruption {
    #[error("the file is {file_bytes} bytes, shorter than its {header_bytes}-byte header")]
    TruncatedHeader { file_bytes: u64, header_bytes: u64 },
    #[error("the file header's checksum does not match")]
    HeaderChecksum,
    #[error("the file header says format version 0, which no build writes")]
    UnknownVersion,
    #[error("the file is named for lsn {name_lsn} but its header says {header_lsn}")]
    NameMismatch { name_lsn: u64, header_lsn: u64 },
    #[error("a frame header's checksum does not match")]
    FrameHeaderChecksum,
    #[error(
        "a frame header says {payload_bytes} payload bytes, more than the limit of {max_bytes}"
    )]
    FrameTooLarge { payload_bytes: u64, max_bytes: u64 },
    #[error("a frame of {frame_bytes} bytes runs past the end of the data ({remaining_bytes} bytes left)")]
    FrameTruncated {
        frame_bytes: u64,
        remaining_bytes: u64,
    },
    #[error("a frame's payload checksum does not match")]
    PayloadChecksum,
    #[error("expected lsn {expected}, found {found}")]
    LsnGap { expected: u64, found: u64 },
    #[error("a payload with a good checksum does not decode: {cause}")]
    Undecodable { cause: String },
    #[error("the log is missing records: {}, so this file should start at lsn {expected}, but it starts at {found}", after_what(previous.as_deref(), *expected))]
    MissingSegment {
        expected: u64,
        found: u64,
        /// The segment before it, if any (else the checkpoint or nothing).
        previous: Option<PathBuf>,
    },
    #[error("the log ends at lsn {end} but its checkpoint covers up to {covered}")]
    EndsBeforeCheckpoint { end: u64, covered: u64 },
    #[error("the trailer's checksum {stored:#010x} does not match the contents' {computed:#010x}")]
    TrailerChecksum { stored: u32, computed: u32 },
    #[error("the trailer counts {trailer} reactors but the checkpoint holds {found}")]
    ReactorCount { trailer: u64, found: u64 },
    #[error("checkpoint entry part {part} of a reactor does not follow part {previous:?} of the same reactor")]
    EntryOutOfOrder { part: u32, previous: Option<u32> },
    #[error("a reactor appears twice in the checkpoint")]
    DuplicateReactor,
}

fn after_what(previous: Option<&std::path::Path>, expected: u64) -> String {
    let end = expected.saturating_sub(1);
    match previous {
        Some(p) => format!("the segment before it, {}, ends at lsn {end}", p.display()),
        None if end == 0 => "no checkpoint covers any record".to_string(),
        None => format!("the checkpoint covers up to lsn {end}"),
    }
}

/// Reading the log back (at open, and when a checkpoint folds segments).
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("reading {}: {source}", file.display())]
    Io { file: PathBuf, source: io::Error },
    #[error("{} is not a Roost {kind}: it starts with {found:?} instead of the magic {expected:?}", file.display())]
    BadMagic {
        file: PathBuf,
        kind: &'static str,
        found: String,
        expected: &'static str,
    },
    #[error("{} is in format version {found}, but this build of Roost reads version {supported} only; run a newer Roost on this directory", file.display())]
    UnsupportedVersion {
        file: PathBuf,
        found: u16,
        supported: u16,
    },
    #[error("{} is corrupt at byte {offset}: {reason}", file.display())]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: Corruption,
    },
    #[error("cutting the torn tail of {} at byte {offset}: {source}", file.display())]
    Truncate {
        file: PathBuf,
        offset: u64,
        source: io::Error,
    },
}

impl RecoverError {
    /// The file the error is about.
    pub fn file(&self) -> &std::path::Path {
        match self {
            RecoverError::Io { file, .. }
            | RecoverError::BadMagic { file, .. }
            | RecoverError::UnsupportedVersion { file, .. }
            | RecoverError::Corrupt { file, .. }
            | RecoverError::Truncate { file, .. } => file,
        }
    }
}

/// `Log::open`.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("invalid durability configuration for {}: {reason}", dir.display())]
    InvalidConfig { dir: PathBuf, reason: String },
    #[error("creating the log directory {}: {source}", dir.display())]
    CreateDir { dir: PathBuf, source: io::Error },
    #[error("listing the log directory {}: {source}", dir.display())]
    ListDir { dir: PathBuf, source: io::Error },
    #[error("removing the leftover file {}: {source}", file.display())]
    RemoveLeftover { file: PathBuf, source: io::Error },
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("syncing {} after recovery: {source}", file.display())]
    Sync { file: PathBuf, source: io::Error },
    #[error("creating the log segment {}: {source}", file.display())]
    CreateSegment { file: PathBuf, source: io::Error },
    #[error("starting the background thread of the log in {}: {source}", dir.display())]
    Spawn { dir: PathBuf, source: io::Error },
}

/// `Log::append` and `Log::append_all`.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("a record of {bytes} bytes is larger than the log's limit of {max_bytes} bytes")]
    TooLarge { bytes: u64, max_bytes: u64 },
    #[error("encoding a record for the log: {cause}")]
    Encode { cause: String },
    #[error("the log in {} has failed and takes no more writes: {cause}", dir.display())]
    Failed { dir: PathBuf, cause: String },
    #[error("the log in {} is closed", dir.display())]
    Closed { dir: PathBuf },
}

/// `Log::sync`, `Log::commit` and `Log::close`.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("the log in {} has failed; records may not be durable: {cause}", dir.display())]
    Failed { dir: PathBuf, cause: String },
}

/// `Log::checkpoint`.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("the log in {} has failed; no checkpoint: {cause}", dir.display())]
    Failed { dir: PathBuf, cause: String },
    #[error("the log in {} is closed; no checkpoint", dir.display())]
    Closed { dir: PathBuf },
    #[error("reading the log back for a checkpoint: {0}")]
    Read(#[from] RecoverError),
    #[error("writing the checkpoint {}: {source}", file.display())]
    Write { file: PathBuf, source: io::Error },
    #[error("writing the checkpoint {}: an entry of {bytes} bytes exceeds the limit of {max_bytes}", file.display())]
    EntryTooLarge {
        file: PathBuf,
        bytes: u64,
        max_bytes: u64,
    },
    #[error("encoding a checkpoint entry for {}: {cause}", file.display())]
    Encode { file: PathBuf, cause: String },
}

/// A sync policy string that is none of the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid sync policy {input:?}: {reason}; accepted forms are \"always\", \"off\", and \"every <ms>\" (also \"every:<ms>\" or \"every=<ms>\") with <ms> from 1 to 60000")]
pub struct ParseSyncPolicyError {
    pub input: String,
    pub reason: &'static str,
}

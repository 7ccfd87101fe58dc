//! Roost's durability: the node's log of reliably committed updates and its
//! checkpoints (issue 21).
//!
//! The node appends a [`Record`] for every change to the reactors it holds
//! (a whole copy installed, the rows one reliable commit changed, a copy
//! dropped), calls [`Log::commit`] before it answers the client, and at
//! start gets its state back from [`Log::open`] as a [`Recovered`]: the fold
//! ([`Recovered::apply`]) of the newest checkpoint and every later record.
//!
//! # Files
//!
//! One directory ([`DurabilityConfig::dir`]) holds:
//!
//! * **Log segments** `log-<first lsn, 20 digits>.wal`. A 22-byte header:
//!   magic `ROOSTWAL`, format version (u16 LE, 1), the first lsn (u64 LE),
//!   a crc32 of those 18 bytes (u32 LE). Then frames, back to back:
//!
//!   ```text
//!   [payload len u32][lsn u64][crc32 of the previous 12 bytes u32]   frame header, 16 bytes
//!   [crc32 of the payload u32][payload: the Record in postcard]
//!   ```
//!
//!   All integers little-endian. Lsns are consecutive across frames and
//!   segments, starting at the segment's first lsn; a payload is at most
//!   [`format::MAX_PAYLOAD_BYTES`] (64 MiB). A segment is created under a
//!   `.tmp` name holding its header, synced, renamed and the directory
//!   synced, so a segment always has its whole header unless the crash came
//!   in the file system. The writer rolls to a new segment once the current
//!   one is past [`DurabilityConfig::segment_bytes`], sealing the old one
//!   with an fdatasync.
//!
//! * **Checkpoints** `checkpoint-<covered lsn, 20 digits>.ckpt`: every
//!   record up to and including the covered lsn folded. An 18-byte header
//!   (magic `ROOSTCKP`, version u16 = 1, covered lsn u64), then one frame
//!   per reactor laid out like a log frame whose lsn field is the covered
//!   lsn and whose payload is a checkpoint entry (postcard: reactor,
//!   t_version, contiguous, part, rows as `RowImage`s; an `Image` record
//!   plus the `contiguous` flag, which an image cannot carry; a reactor
//!   larger than about 8 MiB continues in parts 1, 2, … so that no frame
//!   nears the limit), then a 12-byte trailer: the number of reactors (u64)
//!   and a crc32 of every byte before the trailer. Written to `*.tmp`,
//!   fdatasynced, renamed, directory synced.
//!
//! * Leftover `*.tmp` files (a crash while creating one of the above) are
//!   removed at open. Other file names are ignored.
//!
//! A file whose header has a newer format version is refused with
//! [`RecoverError::UnsupportedVersion`]; a wrong magic with
//! [`RecoverError::BadMagic`]. Every error names the file (and the byte
//! offset where one applies).
//!
//! # Recovery rules ([`Log::open`])
//!
//! 1. Load the newest checkpoint. A corrupt or truncated checkpoint is an
//!    error naming it, never skipped: the segments it covers may be gone.
//!    Older checkpoints are leftovers and are removed.
//! 2. Replay, in order, every frame with lsn above the covered lsn, from
//!    the last segment starting at or before covered + 1 on (earlier
//!    segments are leftovers of a checkpoint that crashed before deleting
//!    them, and are removed). Frames at or below the covered lsn in the
//!    first replayed segment are checked and skipped.
//! 3. A **torn tail** is legal only in the last segment and is cut away
//!    (`set_len` and sync) and reported in [`Recovered::truncated_tail`]: a
//!    frame whose header or payload runs past the end of the file; a frame
//!    header whose checksum fails when the rest of the file is zeros; a
//!    payload whose checksum fails when its frame ends exactly at the end
//!    of the file. A last segment shorter than its header, or all zeros, is
//!    removed (reported with offset 0).
//! 4. Everything else is [`RecoverError::Corrupt`] with the file and
//!    offset: a bad frame with more data after it, any bad frame in a
//!    segment that is not the last, an lsn gap inside or between
//!    segments, a payload with a good checksum that does not decode, a
//!    segment missing between the checkpoint and the log. No record that
//!    failed its checksum is ever applied.
//! 5. The replayed segments are synced (what was read may have been in the
//!    page cache only), and appends go to a new segment starting at the
//!    last lsn + 1 (or to the last segment when it holds no frame).
//!
//! # Writing
//!
//! [`Log::append`] numbers a frame and queues it in memory under the append
//! lock (written to the segment once 1 MiB waits, or by the next sync,
//! commit or roll) and returns its lsn. [`Log::sync`] writes what waits and
//! makes every record appended before the call durable with one fdatasync
//! shared by concurrent callers (group commit: a caller whose lsn a sync in
//! flight or just finished covers does not sync again). [`Log::commit`]
//! applies the [`SyncPolicy`]: `Always` syncs; `EveryMs` and `Off` write to
//! the OS only, so a crash of the process loses nothing and a crash of the
//! machine what the last sync did not cover. Nothing may be answered
//! before `commit` returns: until then a SIGKILL loses the record (which
//! is how a planted early answer is caught). After
//! any failed write or sync the log is **failed**: every later append,
//! sync and commit returns an error naming the directory and the cause, so
//! the node stops taking writes and can still serve reads.
//!
//! # Checkpoints
//!
//! [`Log::checkpoint`] seals the current segment (holding the append lock
//! only for that), folds the current checkpoint and the sealed segments by
//! reading them back from disk (consistent by construction), writes the new
//! checkpoint covering the last sealed lsn, then deletes the folded
//! segments (oldest first) and the old checkpoint. A crash before the
//! rename leaves the old checkpoint and all segments; after it, the new
//! checkpoint and perhaps some folded segments, which recovery skips. The
//! background thread runs a checkpoint once the log not yet folded exceeds
//! [`DurabilityConfig::checkpoint_after_bytes`], and syncs every interval
//! under [`SyncPolicy::EveryMs`].

mod error;
pub mod format;
mod log;
mod policy;
mod read;
mod record;
mod write;

pub use error::{
    AppendError, CheckpointError, Corruption, OpenError, ParseSyncPolicyError, RecoverError,
    SyncError,
};
pub use log::{
    CheckpointReport, DurabilityBugs, DurabilityConfig, FaultInjector, Log, LogStats,
    DEFAULT_CHECKPOINT_AFTER_BYTES, DEFAULT_SEGMENT_BYTES,
};
pub use policy::{SyncPolicy, SYNC_INTERVAL_MS_MAX, SYNC_INTERVAL_MS_MIN};
pub use record::{Lsn, Record, Recovered, RecoveredReactor, RowDelta, RowImage, TruncatedTail};

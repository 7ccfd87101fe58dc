//! The log: appends, group commit, segment rolls, checkpoints, the
//! background thread, recovery at open.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{AppendError, CheckpointError, OpenError, RecoverError, SyncError};
use crate::format::{
    parse_file_name, push_frame, FileKind, MAX_PAYLOAD_BYTES, SEGMENT_HEADER_BYTES,
};
use crate::policy::SyncPolicy;
use crate::read::{read_checkpoint, scan_segment, Torn};
use crate::record::{Lsn, Record, Recovered, TruncatedTail};
use crate::write::{create_segment, sync_dir, write_checkpoint};
use crate::Corruption;

/// Roll to a new segment once the current one is past this (64 MiB).
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Checkpoint in the background once this much log has accumulated since
/// the last checkpoint (256 MiB).
pub const DEFAULT_CHECKPOINT_AFTER_BYTES: u64 = 256 * 1024 * 1024;
/// How often the background thread looks at the log when no sync interval
/// wakes it.
const BACKGROUND_TICK_MS: u64 = 1_000;
/// After a failed background checkpoint, wait this long before the next
/// try, so that a persistent failure does not spin.
const CHECKPOINT_RETRY_MS: u64 = 10_000;
/// The append buffer keeps its capacity between appends up to this size.
const KEEP_BUFFER_BYTES: usize = 1 << 20;
/// Accepted frames are written to the segment once this many bytes wait.
const PENDING_WRITE_BYTES: usize = 1 << 20;

/// Bugs planted on purpose, so that tests can show their checks catch
/// them. All off by default; never turn one on outside a test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurabilityBugs {
    /// `commit()` returns without syncing even under `SyncPolicy::Always`:
    /// a client would be answered before its update is durable.
    pub answer_before_fsync: bool,
}

/// A switch a test flips to make every later write and sync of the log
/// fail as if the disk were full (a root user can write to a read-only
/// directory, so tests need a way that does not depend on permissions).
#[derive(Debug, Clone, Default)]
pub struct FaultInjector {
    fail_writes: Arc<AtomicBool>,
}

impl FaultInjector {
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on (`true`) or no longer (`false`), writes and syncs fail.
    pub fn fail_writes(&self, on: bool) {
        self.fail_writes.store(on, Ordering::SeqCst);
    }

    fn check(&self) -> io::Result<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "no space left on device (injected fault)",
            ));
        }
        Ok(())
    }
}

/// Where and how the log writes.
#[derive(Debug, Clone)]
pub struct DurabilityConfig {
    /// The log's directory, created if missing. One `Log` at a time.
    pub dir: PathBuf,
    pub sync: SyncPolicy,
    /// Roll to a new segment once the current one is past this many bytes.
    pub segment_bytes: u64,
    /// Checkpoint in the background once the segments not yet folded into
    /// a checkpoint hold more than this many bytes.
    pub checkpoint_after_bytes: u64,
    pub bugs: DurabilityBugs,
    pub faults: FaultInjector,
}

impl DurabilityConfig {
    /// The defaults (`SyncPolicy::Always`, 64 MiB segments, a checkpoint
    /// every 256 MiB of log) in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DurabilityConfig {
            dir: dir.into(),
            sync: SyncPolicy::default(),
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            checkpoint_after_bytes: DEFAULT_CHECKPOINT_AFTER_BYTES,
            bugs: DurabilityBugs::default(),
            faults: FaultInjector::default(),
        }
    }
}

/// The log's counters (plain numbers, for `/metrics` and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    pub records_appended: u64,
    /// Frame bytes written (headers included) since open.
    pub bytes_appended: u64,
    /// fdatasyncs of segments (group-commit syncs and seals at a roll).
    pub syncs: u64,
    pub checkpoints: u64,
    /// Segment files now in the directory.
    pub segments: u64,
    /// How long the last checkpoint took.
    pub last_checkpoint_ms: u64,
    /// Failed writes, syncs and checkpoints.
    pub failures: u64,
    pub appended_lsn: Lsn,
    pub durable_lsn: Lsn,
    /// The lsn the newest checkpoint covers (0: none).
    pub checkpoint_lsn: Lsn,
    /// True once a write or sync failed: the log takes no more writes.
    pub failed: bool,
}

/// What one `checkpoint()` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointReport {
    /// Every record up to and including this lsn is in the checkpoint.
    pub covered_lsn: Lsn,
    /// Reactors written (0 with `bytes == 0`: nothing new to fold, no file
    /// written).
    pub reactors: u64,
    /// The checkpoint file's size.
    pub bytes: u64,
    pub duration_ms: u64,
    /// Segment files deleted because the checkpoint covers them.
    pub segments_removed: u64,
}

#[derive(Debug, Clone)]
struct SealedSegment {
    first_lsn: Lsn,
    path: PathBuf,
    bytes: u64,
}

/// State only the appender (under the writer lock) changes.
struct Writer {
    /// Shared so that a group-commit leader can fdatasync it without
    /// holding the writer lock.
    file: Arc<File>,
    path: PathBuf,
    first_lsn: Lsn,
    /// The current segment's length, header included.
    bytes: u64,
    frames: u64,
    next_lsn: Lsn,
    /// Older segments not yet folded into a checkpoint, oldest first.
    /// Bounded by the background checkpoint (each entry is small).
    sealed: Vec<SealedSegment>,
    checkpoint: Option<(Lsn, PathBuf)>,
    /// Bytes of segments (sealed and current) not yet in a checkpoint.
    unfolded_bytes: u64,
    /// Frames accepted (their lsns given out) but not yet written to the
    /// segment: written by the next `commit`/`sync`/roll, or once they pass
    /// `PENDING_WRITE_BYTES`. Until then a crash of the process loses them,
    /// which is why nothing may be answered before `commit` (and why a
    /// planted early answer is caught by a SIGKILL).
    pending: Vec<u8>,
    pending_frames: u64,
}

#[derive(Default)]
struct Counters {
    records_appended: AtomicU64,
    bytes_appended: AtomicU64,
    syncs: AtomicU64,
    checkpoints: AtomicU64,
    segments: AtomicU64,
    last_checkpoint_ms: AtomicU64,
    failures: AtomicU64,
    checkpoint_lsn: AtomicU64,
}

#[derive(Default)]
struct Background {
    stop: bool,
}

struct Inner {
    dir: PathBuf,
    policy: SyncPolicy,
    segment_bytes: u64,
    checkpoint_after_bytes: u64,
    bugs: DurabilityBugs,
    faults: FaultInjector,
    writer: Mutex<Writer>,
    appended_lsn: AtomicU64,
    durable_lsn: AtomicU64,
    /// Group commit: whether a leader's fdatasync is in flight.
    syncing: Mutex<bool>,
    synced: Condvar,
    /// Set once, by the first failed write or sync.
    failure: OnceLock<String>,
    closed: AtomicBool,
    /// One checkpoint at a time.
    checkpointing: Mutex<()>,
    checkpoint_wanted: AtomicBool,
    background: Mutex<Background>,
    wake: Condvar,
    counters: Counters,
}

/// The node's write-ahead log. `Send + Sync`; share it as `Arc<Log>`.
pub struct Log {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not turn into a panic here: the data under
    // these locks stays consistent between statements.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Log {
    /// Opens (or creates) the log in `config.dir`, recovers its state and
    /// starts the background thread. See the crate documentation for the
    /// recovery rules.
    pub fn open(config: DurabilityConfig) -> Result<(Arc<Log>, Recovered), OpenError> {
        let dir = config.dir.clone();
        let invalid = |reason: &str| OpenError::InvalidConfig {
            dir: dir.clone(),
            reason: reason.to_string(),
        };
        config.sync.validate().map_err(invalid)?;
        if config.segment_bytes == 0 {
            return Err(invalid("segment_bytes must be above 0"));
        }
        if config.checkpoint_after_bytes == 0 {
            return Err(invalid("checkpoint_after_bytes must be above 0"));
        }
        fs::create_dir_all(&dir).map_err(|source| OpenError::CreateDir {
            dir: dir.clone(),
            source,
        })?;

        let listing = list_dir(&dir)?;
        if !listing.tmp.is_empty() {
            for file in &listing.tmp {
                // An unfinished segment or checkpoint from a crash.
                fs::remove_file(file).map_err(|source| OpenError::RemoveLeftover {
                    file: file.clone(),
                    source,
                })?;
            }
            sync_dir(&dir).map_err(|source| OpenError::Sync {
                file: dir.clone(),
                source,
            })?;
        }
        let (mut recovered, replayed) = recover(&dir, &listing)?;

        let sync_err = |file: &Path| {
            let file = file.to_path_buf();
            move |source| OpenError::Sync { file, source }
        };
        // What was read back may sit in the page cache only (the process
        // died, not the machine): make it durable before writing after it.
        for seg in &replayed.kept {
            File::open(&seg.path)
                .and_then(|f| f.sync_data())
                .map_err(sync_err(&seg.path))?;
        }
        // Leftovers of a checkpoint that crashed before deleting them.
        let mut removed_any = false;
        for file in replayed.leftover.iter() {
            fs::remove_file(file).map_err(|source| OpenError::RemoveLeftover {
                file: file.clone(),
                source,
            })?;
            removed_any = true;
        }
        if removed_any {
            sync_dir(&dir).map_err(sync_err(&dir))?;
        }

        let last_lsn = recovered.last_lsn;
        let mut kept = replayed.kept;
        // An empty last segment (only its header) takes the appends; else
        // a new one starts after the last record.
        let reuse = match kept.last() {
            Some(s) if s.frames == 0 && s.first_lsn == last_lsn + 1 => kept.pop(),
            _ => None,
        };
        let (file, path, bytes) = if let Some(seg) = reuse {
            let file = OpenOptions::new()
                .append(true)
                .open(&seg.path)
                .map_err(|source| OpenError::CreateSegment {
                    file: seg.path.clone(),
                    source,
                })?;
            debug_assert_eq!(seg.bytes, SEGMENT_HEADER_BYTES);
            (file, seg.path, seg.bytes)
        } else {
            let (file, path) =
                create_segment(&dir, last_lsn + 1).map_err(|source| OpenError::CreateSegment {
                    file: dir.join(crate::format::segment_file_name(last_lsn + 1)),
                    source,
                })?;
            (file, path, SEGMENT_HEADER_BYTES)
        };
        let sealed: Vec<SealedSegment> = kept
            .into_iter()
            .map(|s| SealedSegment {
                first_lsn: s.first_lsn,
                path: s.path,
                bytes: s.bytes,
            })
            .collect();
        let unfolded_bytes = sealed.iter().map(|s| s.bytes).sum::<u64>() + bytes;
        let counters = Counters::default();
        counters
            .segments
            .store(sealed.len() as u64 + 1, Ordering::Relaxed);
        counters
            .checkpoint_lsn
            .store(recovered.checkpoint_lsn.unwrap_or(0), Ordering::Relaxed);
        let writer = Writer {
            file: Arc::new(file),
            path,
            first_lsn: last_lsn + 1,
            bytes,
            frames: 0,
            next_lsn: last_lsn + 1,
            sealed,
            checkpoint: listing
                .checkpoints
                .last()
                .cloned()
                .filter(|(lsn, _)| Some(*lsn) == recovered.checkpoint_lsn),
            unfolded_bytes,
            pending: Vec::new(),
            pending_frames: 0,
        };
        let inner = Arc::new(Inner {
            dir: dir.clone(),
            policy: config.sync,
            segment_bytes: config.segment_bytes,
            checkpoint_after_bytes: config.checkpoint_after_bytes,
            bugs: config.bugs,
            faults: config.faults,
            writer: Mutex::new(writer),
            appended_lsn: AtomicU64::new(last_lsn),
            durable_lsn: AtomicU64::new(last_lsn),
            syncing: Mutex::new(false),
            synced: Condvar::new(),
            failure: OnceLock::new(),
            closed: AtomicBool::new(false),
            checkpointing: Mutex::new(()),
            checkpoint_wanted: AtomicBool::new(false),
            background: Mutex::new(Background::default()),
            wake: Condvar::new(),
            counters,
        });
        let thread_inner = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("roost-durability".into())
            .spawn(move || thread_inner.background())
            .map_err(|source| OpenError::Spawn {
                dir: dir.clone(),
                source,
            })?;
        recovered.records_replayed = replayed.records;
        tracing::info!(
            dir = %dir.display(),
            last_lsn,
            checkpoint_lsn = ?recovered.checkpoint_lsn,
            records_replayed = replayed.records,
            reactors = recovered.reactors.len(),
            truncated = recovered.truncated_tail.is_some(),
            "durability log recovered"
        );
        let log = Arc::new(Log {
            inner,
            thread: Mutex::new(Some(thread)),
        });
        Ok((log, recovered))
    }

    /// Appends one record; returns its lsn. The frame waits in memory (see
    /// `sync` and `commit`, which write it). Thread-safe.
    pub fn append(&self, record: &Record) -> Result<Lsn, AppendError> {
        self.append_all(std::slice::from_ref(record))
    }

    /// Appends several records under one lock, at consecutive lsns; returns
    /// the last one (the current last lsn when `records` is empty).
    pub fn append_all(&self, records: &[Record]) -> Result<Lsn, AppendError> {
        self.inner.append_all(records)
    }

    /// Makes every record appended before the call durable. Concurrent
    /// callers share one fdatasync (group commit).
    pub fn sync(&self) -> Result<(), SyncError> {
        self.inner.sync()
    }

    /// What a caller does before answering a client: under
    /// `SyncPolicy::Always` a `sync()`; otherwise the accepted records are
    /// written to the OS without a sync (a crash of the process loses
    /// nothing; the background thread syncs every interval under `EveryMs`;
    /// `Off` syncs only at rolls and close). Fails once the log has failed.
    pub fn commit(&self) -> Result<(), SyncError> {
        let inner = &self.inner;
        inner.check_sync_failed()?;
        match inner.policy {
            // The planted bug: nothing written, nothing synced.
            _ if inner.bugs.answer_before_fsync => Ok(()),
            SyncPolicy::Always => inner.sync(),
            // Written to the OS: a crash of the process loses nothing.
            SyncPolicy::EveryMs(_) | SyncPolicy::Off => inner.flush(),
        }
    }

    /// The last lsn appended (numbered; perhaps not yet written).
    pub fn appended_lsn(&self) -> Lsn {
        self.inner.appended_lsn.load(Ordering::Acquire)
    }

    /// The last lsn known durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.inner.durable_lsn.load(Ordering::Acquire)
    }

    /// Folds the current checkpoint and every sealed segment (the current
    /// one is sealed first) into a new checkpoint, by reading those files
    /// back, then deletes what it covers. Appends go on meanwhile; one
    /// checkpoint runs at a time.
    pub fn checkpoint(&self) -> Result<CheckpointReport, CheckpointError> {
        self.inner.checkpoint()
    }

    pub fn stats(&self) -> LogStats {
        self.inner.stats()
    }

    /// The counters in Prometheus' text format.
    pub fn prometheus(&self) -> String {
        let s = self.stats();
        let rows: [(&str, &str, &str, u64); 10] = [
            (
                "records_appended_total",
                "counter",
                "Records appended to the log since it was opened.",
                s.records_appended,
            ),
            (
                "bytes_appended_total",
                "counter",
                "Frame bytes appended to the log since it was opened.",
                s.bytes_appended,
            ),
            (
                "syncs_total",
                "counter",
                "fdatasyncs of log segments (group commits and seals).",
                s.syncs,
            ),
            (
                "checkpoints_total",
                "counter",
                "Checkpoints written since the log was opened.",
                s.checkpoints,
            ),
            (
                "segments",
                "gauge",
                "Log segment files in the directory.",
                s.segments,
            ),
            (
                "last_checkpoint_ms",
                "gauge",
                "How long the last checkpoint took, in milliseconds.",
                s.last_checkpoint_ms,
            ),
            (
                "failures_total",
                "counter",
                "Failed log writes, syncs and checkpoints.",
                s.failures,
            ),
            (
                "appended_lsn",
                "gauge",
                "The last lsn appended.",
                s.appended_lsn,
            ),
            (
                "durable_lsn",
                "gauge",
                "The last lsn known durable.",
                s.durable_lsn,
            ),
            (
                "checkpoint_lsn",
                "gauge",
                "The lsn the newest checkpoint covers.",
                s.checkpoint_lsn,
            ),
        ];
        // No `failed` gauge here: the node exports `roost_durability_failed`
        // beside these (a name twice would break the scrape).
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            let _ = writeln!(out, "# HELP roost_durability_{name} {help}");
            let _ = writeln!(out, "# TYPE roost_durability_{name} {kind}");
            let _ = writeln!(out, "roost_durability_{name} {value}");
        }
        out
    }

    /// Stops the background thread and makes everything appended durable.
    /// Later appends are refused. Also run on drop.
    pub fn close(&self) -> Result<(), SyncError> {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::SeqCst);
        // A barrier: an append that passed its closed check before the
        // store has finished writing once the lock is ours, so the final
        // sync below covers it.
        drop(lock(&inner.writer));
        {
            let mut bg = lock(&inner.background);
            bg.stop = true;
            inner.wake.notify_all();
        }
        if let Some(handle) = lock(&self.thread).take() {
            if handle.join().is_err() {
                tracing::error!(dir = %inner.dir.display(), "the durability background thread panicked");
            }
        }
        inner.sync()
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!(error = %e, "closing the durability log");
        }
    }
}

impl Inner {
    fn failed_cause(&self) -> Option<String> {
        self.failure.get().cloned()
    }

    /// Marks the log failed (the first cause sticks) and returns the cause.
    fn fail(&self, cause: String) -> String {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        let first = self.failure.get_or_init(|| {
            tracing::error!(dir = %self.dir.display(), %cause, "durability log failed; no more writes");
            cause
        });
        first.clone()
    }

    fn check_sync_failed(&self) -> Result<(), SyncError> {
        match self.failed_cause() {
            Some(cause) => Err(SyncError::Failed {
                dir: self.dir.clone(),
                cause,
            }),
            None => Ok(()),
        }
    }

    fn append_failed(&self) -> Option<AppendError> {
        if let Some(cause) = self.failed_cause() {
            return Some(AppendError::Failed {
                dir: self.dir.clone(),
                cause,
            });
        }
        if self.closed.load(Ordering::SeqCst) {
            return Some(AppendError::Closed {
                dir: self.dir.clone(),
            });
        }
        None
    }

    fn append_all(&self, records: &[Record]) -> Result<Lsn, AppendError> {
        if let Some(e) = self.append_failed() {
            return Err(e);
        }
        // Encode outside the lock so that appenders overlap there.
        let mut payloads = Vec::with_capacity(records.len());
        for record in records {
            let payload = postcard::to_allocvec(record).map_err(|e| AppendError::Encode {
                cause: e.to_string(),
            })?;
            if payload.len() as u64 > MAX_PAYLOAD_BYTES {
                return Err(AppendError::TooLarge {
                    bytes: payload.len() as u64,
                    max_bytes: MAX_PAYLOAD_BYTES,
                });
            }
            payloads.push(payload);
        }
        let mut w = lock(&self.writer);
        if let Some(e) = self.append_failed() {
            return Err(e);
        }
        if payloads.is_empty() {
            return Ok(w.next_lsn + w.pending_frames - 1);
        }
        let failed = |cause: String| AppendError::Failed {
            dir: self.dir.clone(),
            cause: self.fail(cause),
        };
        let mut lsn = w.next_lsn + w.pending_frames;
        let mut result = Ok(());
        for payload in &payloads {
            // Roll before a record, never after it, so that a failed roll
            // leaves no record half-accepted.
            if w.frames + w.pending_frames > 0
                && w.bytes + w.pending.len() as u64 >= self.segment_bytes
            {
                result = self.write_pending(&mut w).and_then(|()| self.roll(&mut w));
                if result.is_err() {
                    break;
                }
            }
            push_frame(&mut w.pending, lsn, payload);
            lsn += 1;
            w.pending_frames += 1;
        }
        if result.is_ok() && w.pending.len() >= PENDING_WRITE_BYTES {
            result = self.write_pending(&mut w);
        }
        result.map_err(failed)?;
        let last = w.next_lsn + w.pending_frames - 1;
        debug_assert_eq!(last, lsn - 1);
        self.appended_lsn.store(last, Ordering::Release);
        if w.unfolded_bytes > self.checkpoint_after_bytes
            && !self.checkpoint_wanted.swap(true, Ordering::AcqRel)
        {
            self.wake.notify_all();
        }
        Ok(last)
    }

    /// Writes the accepted frames to the current segment (to the OS: not
    /// yet durable).
    fn write_pending(&self, w: &mut Writer) -> Result<(), String> {
        let mut pending = std::mem::take(&mut w.pending);
        let frames = std::mem::take(&mut w.pending_frames);
        let result = self.write_frames(w, &pending, frames);
        pending.clear();
        if pending.capacity() <= KEEP_BUFFER_BYTES {
            w.pending = pending;
        }
        result
    }

    /// Writes the accepted frames to the OS (a crash of the process then
    /// loses nothing; a crash of the machine may).
    fn flush(&self) -> Result<(), SyncError> {
        self.check_sync_failed()?;
        let mut w = lock(&self.writer);
        self.write_pending(&mut w)
            .map_err(|cause| SyncError::Failed {
                dir: self.dir.clone(),
                cause: self.fail(cause),
            })
    }

    /// Writes buffered frames to the current segment.
    fn write_frames(&self, w: &mut Writer, buf: &[u8], frames: u64) -> Result<(), String> {
        if frames == 0 {
            return Ok(());
        }
        let offset = w.bytes;
        self.faults
            .check()
            .and_then(|()| (&*w.file).write_all(buf))
            .map_err(|e| format!("writing {} at byte {offset}: {e}", w.path.display()))?;
        let n = buf.len() as u64;
        w.bytes += n;
        w.unfolded_bytes += n;
        w.frames += frames;
        w.next_lsn += frames;
        self.counters
            .records_appended
            .fetch_add(frames, Ordering::Relaxed);
        self.counters.bytes_appended.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Seals the current segment (durable) and starts the next one.
    fn roll(&self, w: &mut Writer) -> Result<(), String> {
        debug_assert!(w.frames > 0, "a segment without frames is never sealed");
        debug_assert!(
            w.pending.is_empty(),
            "accepted frames go to the segment they were numbered for"
        );
        self.faults
            .check()
            .and_then(|()| w.file.sync_data())
            .map_err(|e| format!("syncing {} to seal it: {e}", w.path.display()))?;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        self.durable_lsn.fetch_max(w.next_lsn - 1, Ordering::AcqRel);
        let first = w.next_lsn;
        let (file, path) = self
            .faults
            .check()
            .and_then(|()| create_segment(&self.dir, first))
            .map_err(|e| {
                format!(
                    "creating the segment {}: {e}",
                    self.dir
                        .join(crate::format::segment_file_name(first))
                        .display()
                )
            })?;
        let old_path = std::mem::replace(&mut w.path, path);
        w.sealed.push(SealedSegment {
            first_lsn: w.first_lsn,
            path: old_path,
            bytes: w.bytes,
        });
        w.file = Arc::new(file);
        w.first_lsn = first;
        w.bytes = SEGMENT_HEADER_BYTES;
        w.frames = 0;
        w.unfolded_bytes += SEGMENT_HEADER_BYTES;
        self.counters.segments.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn sync(&self) -> Result<(), SyncError> {
        let target = self.appended_lsn.load(Ordering::Acquire);
        let mut syncing = lock(&self.syncing);
        // Bounded: each pass either returns, becomes the leader, or waits
        // for the leader in flight, whose sync covers more each time.
        loop {
            self.check_sync_failed()?;
            if self.durable_lsn.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            if !*syncing {
                *syncing = true;
                break;
            }
            syncing = self
                .synced
                .wait(syncing)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(syncing);
        // The leader: sync the current segment, covering everything
        // appended by now (older segments were synced when sealed).
        let (file, path, lsn, written) = {
            let mut w = lock(&self.writer);
            let written = self.write_pending(&mut w);
            (Arc::clone(&w.file), w.path.clone(), w.next_lsn - 1, written)
        };
        let result = written.and_then(|()| {
            self.faults
                .check()
                .and_then(|()| file.sync_data())
                .map_err(|e| format!("fdatasync of {} failed: {e}", path.display()))
        });
        let mut syncing = lock(&self.syncing);
        *syncing = false;
        let result = match result {
            Ok(()) => {
                self.counters.syncs.fetch_add(1, Ordering::Relaxed);
                self.durable_lsn.fetch_max(lsn, Ordering::AcqRel);
                debug_assert!(lsn >= target);
                Ok(())
            }
            Err(cause) => Err(SyncError::Failed {
                dir: self.dir.clone(),
                cause: self.fail(cause),
            }),
        };
        self.synced.notify_all();
        result
    }

    fn checkpoint(&self) -> Result<CheckpointReport, CheckpointError> {
        let _one = lock(&self.checkpointing);
        if let Some(cause) = self.failed_cause() {
            return Err(CheckpointError::Failed {
                dir: self.dir.clone(),
                cause,
            });
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err(CheckpointError::Closed {
                dir: self.dir.clone(),
            });
        }
        let started = Instant::now();
        let result = self.checkpoint_inner(started);
        if result.is_err() {
            self.counters.failures.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn checkpoint_inner(&self, started: Instant) -> Result<CheckpointReport, CheckpointError> {
        // Hold the append lock only to seal the current segment.
        let (sealed, old, covered) = {
            let mut w = lock(&self.writer);
            if w.frames + w.pending_frames > 0 {
                self.write_pending(&mut w)
                    .and_then(|()| self.roll(&mut w))
                    .map_err(|cause| CheckpointError::Failed {
                        dir: self.dir.clone(),
                        cause: self.fail(cause),
                    })?;
            }
            (w.sealed.clone(), w.checkpoint.clone(), w.first_lsn - 1)
        };
        let old_covered = old.as_ref().map_or(0, |(lsn, _)| *lsn);
        debug_assert!(covered >= old_covered);
        let mut report = CheckpointReport {
            covered_lsn: old_covered,
            ..CheckpointReport::default()
        };
        let mut written = None;
        if covered > old_covered {
            // Fold from the files, not from the database: the checkpoint is
            // then exactly the log's state at `covered`.
            let mut state = Recovered::default();
            if let Some((lsn, path)) = &old {
                state.reactors = read_checkpoint(path, *lsn)?.reactors;
            }
            let mut end = old_covered;
            let mut next: Option<(Lsn, &Path)> = None;
            for seg in &sealed {
                if let Some((n, previous)) = next {
                    if seg.first_lsn != n {
                        return Err(RecoverError::Corrupt {
                            file: seg.path.clone(),
                            offset: 0,
                            reason: Corruption::MissingSegment {
                                expected: n,
                                found: seg.first_lsn,
                                previous: Some(previous.to_path_buf()),
                            },
                        }
                        .into());
                    }
                }
                let scan =
                    scan_segment(&seg.path, seg.first_lsn, false, old_covered, &mut |_, r| {
                        state.apply(&r)
                    })?;
                next = Some((scan.end_lsn + 1, seg.path.as_path()));
                end = end.max(scan.end_lsn);
            }
            if end != covered {
                let file = sealed
                    .last()
                    .map_or_else(|| self.dir.clone(), |s| s.path.clone());
                return Err(RecoverError::Corrupt {
                    file,
                    offset: 0,
                    reason: Corruption::EndsBeforeCheckpoint { end, covered },
                }
                .into());
            }
            let reactors = state.reactors.len() as u64;
            let done = self
                .faults
                .check()
                .map_err(|source| CheckpointError::Write {
                    file: self.dir.join(crate::format::checkpoint_file_name(covered)),
                    source,
                })
                .and_then(|()| write_checkpoint(&self.dir, covered, state.reactors.iter()));
            let done = match done {
                Ok(done) => done,
                Err(e) => {
                    let tmp = crate::format::tmp_path(
                        &self.dir.join(crate::format::checkpoint_file_name(covered)),
                    );
                    let _ = fs::remove_file(tmp);
                    return Err(e);
                }
            };
            report.covered_lsn = covered;
            report.reactors = reactors;
            report.bytes = done.bytes;
            written = Some(done.path);
        }
        // The new checkpoint is durable: what it covers can go, oldest
        // first (a crash midway leaves a suffix, which recovery skips).
        {
            let mut w = lock(&self.writer);
            debug_assert!(w.sealed.len() >= sealed.len());
            let n = sealed.len().min(w.sealed.len());
            let folded_bytes: u64 = w.sealed.drain(..n).map(|s| s.bytes).sum();
            w.unfolded_bytes = w.unfolded_bytes.saturating_sub(folded_bytes);
            if let Some(path) = &written {
                w.checkpoint = Some((covered, path.clone()));
            }
            self.counters
                .segments
                .store(w.sealed.len() as u64 + 1, Ordering::Relaxed);
        }
        let mut removed = 0u64;
        let mut doomed: Vec<&Path> = sealed.iter().map(|s| s.path.as_path()).collect();
        if written.is_some() {
            if let Some((_, path)) = &old {
                doomed.push(path);
            }
        }
        for path in doomed {
            match fs::remove_file(path) {
                Ok(()) => removed += u64::from(path.extension().is_some_and(|e| e == "wal")),
                Err(e) => {
                    // Harmless: recovery skips what a checkpoint covers and
                    // removes it then.
                    self.counters.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(file = %path.display(), error = %e, "removing a file a checkpoint covers");
                }
            }
        }
        if let Err(e) = sync_dir(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "syncing the directory after a checkpoint");
        }
        report.segments_removed = removed;
        report.duration_ms = elapsed_ms(started);
        if written.is_some() {
            self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
            self.counters
                .last_checkpoint_ms
                .store(report.duration_ms, Ordering::Relaxed);
            self.counters
                .checkpoint_lsn
                .store(covered, Ordering::Relaxed);
            tracing::info!(
                dir = %self.dir.display(),
                covered_lsn = covered,
                reactors = report.reactors,
                bytes = report.bytes,
                segments_removed = removed,
                duration_ms = report.duration_ms,
                "durability checkpoint written"
            );
        }
        Ok(report)
    }

    fn stats(&self) -> LogStats {
        let c = &self.counters;
        LogStats {
            records_appended: c.records_appended.load(Ordering::Relaxed),
            bytes_appended: c.bytes_appended.load(Ordering::Relaxed),
            syncs: c.syncs.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            segments: c.segments.load(Ordering::Relaxed),
            last_checkpoint_ms: c.last_checkpoint_ms.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            appended_lsn: self.appended_lsn.load(Ordering::Acquire),
            durable_lsn: self.durable_lsn.load(Ordering::Acquire),
            checkpoint_lsn: c.checkpoint_lsn.load(Ordering::Relaxed),
            failed: self.failure.get().is_some(),
        }
    }

    /// The background thread: periodic syncs under `EveryMs`, and a
    /// checkpoint once enough log has accumulated.
    fn background(&self) {
        let tick_ms = match self.policy {
            SyncPolicy::EveryMs(ms) => ms,
            _ => BACKGROUND_TICK_MS,
        };
        let mut retry_at: Option<Instant> = None;
        // Bounded by `stop`, which close() (and drop) sets.
        loop {
            {
                let bg = lock(&self.background);
                if bg.stop {
                    return;
                }
                let bg = if self.checkpoint_wanted.load(Ordering::Acquire) {
                    bg
                } else {
                    self.wake
                        .wait_timeout(bg, Duration::from_millis(tick_ms))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                };
                if bg.stop {
                    return;
                }
            }
            if self.failure.get().is_some() {
                // Nothing more to do but wait for close.
                self.checkpoint_wanted.store(false, Ordering::Release);
                continue;
            }
            if matches!(self.policy, SyncPolicy::EveryMs(_))
                && self.appended_lsn.load(Ordering::Acquire)
                    > self.durable_lsn.load(Ordering::Acquire)
            {
                if let Err(e) = self.sync() {
                    tracing::error!(error = %e, "background sync of the durability log");
                }
            }
            let wanted = self.checkpoint_wanted.swap(false, Ordering::AcqRel)
                || lock(&self.writer).unfolded_bytes > self.checkpoint_after_bytes;
            let may = retry_at.is_none_or(|t| Instant::now() >= t);
            if wanted && may {
                match self.checkpoint() {
                    Ok(_) => retry_at = None,
                    Err(e) => {
                        tracing::error!(error = %e, "background checkpoint of the durability log");
                        retry_at =
                            Some(Instant::now() + Duration::from_millis(CHECKPOINT_RETRY_MS));
                    }
                }
            }
        }
    }
}

/// The files of a log directory, by kind, sorted by lsn.
struct Listing {
    segments: Vec<(Lsn, PathBuf)>,
    checkpoints: Vec<(Lsn, PathBuf)>,
    tmp: Vec<PathBuf>,
}

fn list_dir(dir: &Path) -> Result<Listing, OpenError> {
    let list_err = |source| OpenError::ListDir {
        dir: dir.to_path_buf(),
        source,
    };
    let mut listing = Listing {
        segments: Vec::new(),
        checkpoints: Vec::new(),
        tmp: Vec::new(),
    };
    for entry in fs::read_dir(dir).map_err(list_err)? {
        let entry = entry.map_err(list_err)?;
        let name = entry.file_name();
        let Some(kind) = name.to_str().and_then(parse_file_name) else {
            continue; // not ours
        };
        let path = entry.path();
        match kind {
            FileKind::Segment(lsn) => listing.segments.push((lsn, path)),
            FileKind::Checkpoint(lsn) => listing.checkpoints.push((lsn, path)),
            FileKind::Tmp => listing.tmp.push(path),
        }
    }
    listing.segments.sort();
    listing.checkpoints.sort();
    Ok(listing)
}

struct KeptSegment {
    first_lsn: Lsn,
    path: PathBuf,
    bytes: u64,
    frames: u64,
}

struct Replayed {
    kept: Vec<KeptSegment>,
    /// Files a newer checkpoint covers: removed once recovery succeeded.
    leftover: Vec<PathBuf>,
    records: u64,
}

/// Loads the newest checkpoint and replays the segments after it.
fn recover(dir: &Path, listing: &Listing) -> Result<(Recovered, Replayed), RecoverError> {
    let mut recovered = Recovered::default();
    let mut leftover = Vec::new();
    let base = match listing.checkpoints.split_last() {
        Some(((lsn, path), older)) => {
            // Never skipped when bad: the segments it covers may be gone.
            recovered.reactors = read_checkpoint(path, *lsn)?.reactors;
            recovered.checkpoint_lsn = Some(*lsn);
            leftover.extend(older.iter().map(|(_, p)| p.clone()));
            *lsn
        }
        None => 0,
    };
    let segments = &listing.segments;
    // Replay from the last segment that starts at or before base + 1; the
    // ones before it are wholly covered by the checkpoint.
    let start = match segments.iter().rposition(|(first, _)| *first <= base + 1) {
        Some(i) => i,
        None => {
            if let Some((first, path)) = segments.first() {
                return Err(RecoverError::Corrupt {
                    file: path.clone(),
                    offset: 0,
                    reason: Corruption::MissingSegment {
                        expected: base + 1,
                        found: *first,
                        previous: None,
                    },
                });
            }
            segments.len()
        }
    };
    leftover.splice(0..0, segments[..start].iter().map(|(_, p)| p.clone()));
    let replay = &segments[start..];
    let mut kept = Vec::new();
    let mut records = 0u64;
    let mut last_lsn = base;
    let mut next: Option<(Lsn, &Path)> = None;
    for (i, (first, path)) in replay.iter().enumerate() {
        let is_last = i + 1 == replay.len();
        if let Some((n, previous)) = next {
            if *first != n {
                return Err(RecoverError::Corrupt {
                    file: path.clone(),
                    offset: 0,
                    reason: Corruption::MissingSegment {
                        expected: n,
                        found: *first,
                        previous: Some(previous.to_path_buf()),
                    },
                });
            }
        }
        let scan = scan_segment(path, *first, is_last, base, &mut |_, record| {
            recovered.apply(&record);
            records += 1;
        })?;
        match scan.torn {
            None => {}
            Some(Torn::Tail {
                offset,
                bytes_dropped,
            }) => {
                debug_assert!(is_last);
                OpenOptions::new()
                    .write(true)
                    .open(path)
                    .and_then(|f| {
                        f.set_len(offset)?;
                        f.sync_all()
                    })
                    .map_err(|source| RecoverError::Truncate {
                        file: path.clone(),
                        offset,
                        source,
                    })?;
                tracing::warn!(file = %path.display(), offset, bytes_dropped, "cut a torn tail from the log");
                recovered.truncated_tail = Some(TruncatedTail {
                    file: path.clone(),
                    offset,
                    bytes_dropped,
                });
            }
            Some(Torn::Header { file_bytes }) => {
                debug_assert!(is_last);
                fs::remove_file(path)
                    .and_then(|()| sync_dir(dir))
                    .map_err(|source| RecoverError::Truncate {
                        file: path.clone(),
                        offset: 0,
                        source,
                    })?;
                tracing::warn!(file = %path.display(), file_bytes, "removed a log segment with a torn header");
                recovered.truncated_tail = Some(TruncatedTail {
                    file: path.clone(),
                    offset: 0,
                    bytes_dropped: file_bytes,
                });
                continue;
            }
        }
        next = Some((scan.end_lsn + 1, path.as_path()));
        last_lsn = last_lsn.max(scan.end_lsn);
        kept.push(KeptSegment {
            first_lsn: *first,
            path: path.clone(),
            bytes: scan.valid_bytes,
            frames: scan.frames,
        });
    }
    recovered.last_lsn = last_lsn;
    Ok((
        recovered,
        Replayed {
            kept,
            leftover,
            records,
        },
    ))
}

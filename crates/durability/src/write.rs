//! Creating files: new segments and checkpoints, each written under a
//! `.tmp` name, synced, renamed into place, and the directory synced, so
//! that a crash leaves either the whole file or a leftover `.tmp`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::CheckpointError;
use crate::format::{
    checkpoint_file_name, checkpoint_header, push_frame, segment_file_name, segment_header,
    tmp_path, MAX_CHECKPOINT_ENTRY_BYTES,
};
use crate::record::{Lsn, RecoveredReactor};

/// Rows per checkpoint entry are cut at about this many bytes so that an
/// entry stays far below the frame limit (one row may still be larger).
const ENTRY_TARGET_BYTES: u64 = 8 * 1024 * 1024;
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Makes a rename or a removal in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `log-<first_lsn>.wal` holding only its header, durable, and
/// opens it for appending. Refuses to replace an existing segment.
pub(crate) fn create_segment(dir: &Path, first_lsn: Lsn) -> io::Result<(File, PathBuf)> {
    let path = dir.join(segment_file_name(first_lsn));
    if path.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists", path.display()),
        ));
    }
    let tmp = tmp_path(&path);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(&segment_header(first_lsn))?;
        f.sync_data()?;
    }
    fs::rename(&tmp, &path)?;
    sync_dir(dir)?;
    let file = OpenOptions::new().append(true).open(&path)?;
    Ok((file, path))
}

/// Writes bytes on, hashing them for the trailer.
struct HashingWriter {
    out: BufWriter<File>,
    hasher: crc32fast::Hasher,
    bytes: u64,
}

impl HashingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<()> {
        self.hasher.update(buf);
        self.bytes += buf.len() as u64;
        self.out.write_all(buf)
    }
}

#[derive(Serialize)]
struct RowRef<'a> {
    relation: &'a str,
    key: &'a [u8],
    value: &'a [u8],
}

/// Serializes exactly like `read::CheckpointEntry` (slices and vectors of
/// bytes, strs and Strings encode alike in postcard), without copying the
/// rows.
#[derive(Serialize)]
struct EntryRef<'a> {
    reactor: &'a [u8],
    t_version: u64,
    contiguous: bool,
    part: u32,
    rows: Vec<RowRef<'a>>,
}

/// What a written checkpoint holds.
pub(crate) struct WrittenCheckpoint {
    pub path: PathBuf,
    pub bytes: u64,
}

/// Writes `checkpoint-<covered_lsn>.ckpt` holding `reactors`, durably.
pub(crate) fn write_checkpoint<'a>(
    dir: &Path,
    covered_lsn: Lsn,
    reactors: impl ExactSizeIterator<Item = (&'a Vec<u8>, &'a RecoveredReactor)>,
) -> Result<WrittenCheckpoint, CheckpointError> {
    let path = dir.join(checkpoint_file_name(covered_lsn));
    let tmp = tmp_path(&path);
    let write_err = |source| CheckpointError::Write {
        file: tmp.clone(),
        source,
    };
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(write_err)?;
    let mut w = HashingWriter {
        out: BufWriter::with_capacity(WRITE_BUFFER_BYTES, file),
        hasher: crc32fast::Hasher::new(),
        bytes: 0,
    };
    let count = reactors.len() as u64;
    w.write(&checkpoint_header(covered_lsn))
        .map_err(write_err)?;
    let mut frame = Vec::new();
    let mut emit = |w: &mut HashingWriter, entry: &EntryRef<'_>| -> Result<(), CheckpointError> {
        let payload = postcard::to_allocvec(entry).map_err(|e| CheckpointError::Encode {
            file: tmp.clone(),
            cause: e.to_string(),
        })?;
        if payload.len() as u64 > MAX_CHECKPOINT_ENTRY_BYTES {
            return Err(CheckpointError::EntryTooLarge {
                file: tmp.clone(),
                bytes: payload.len() as u64,
                max_bytes: MAX_CHECKPOINT_ENTRY_BYTES,
            });
        }
        frame.clear();
        // Every checkpoint frame carries the lsn the checkpoint covers.
        push_frame(&mut frame, covered_lsn, &payload);
        w.write(&frame).map_err(write_err)
    };
    for (reactor, copy) in reactors {
        let mut entry = EntryRef {
            reactor,
            t_version: copy.t_version,
            contiguous: copy.contiguous,
            part: 0,
            rows: Vec::new(),
        };
        let mut entry_bytes = 0u64;
        for ((relation, key), value) in &copy.rows {
            let row_bytes = (relation.len() + key.len() + value.len()) as u64 + 16;
            if !entry.rows.is_empty() && entry_bytes + row_bytes > ENTRY_TARGET_BYTES {
                emit(&mut w, &entry)?;
                entry.rows.clear();
                entry.part += 1;
                entry_bytes = 0;
            }
            entry.rows.push(RowRef {
                relation,
                key,
                value,
            });
            entry_bytes += row_bytes;
        }
        emit(&mut w, &entry)?;
    }
    let computed = w.hasher.clone().finalize();
    let mut trailer = [0u8; 12];
    trailer[..8].copy_from_slice(&count.to_le_bytes());
    trailer[8..].copy_from_slice(&computed.to_le_bytes());
    w.write(&trailer).map_err(write_err)?;
    let bytes = w.bytes;
    let file = w.out.into_inner().map_err(|e| write_err(e.into_error()))?;
    file.sync_data().map_err(write_err)?;
    drop(file);
    fs::rename(&tmp, &path).map_err(write_err)?;
    sync_dir(dir).map_err(|source| CheckpointError::Write {
        file: path.clone(),
        source,
    })?;
    Ok(WrittenCheckpoint { path, bytes })
}

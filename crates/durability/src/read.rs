//! Reading segments and checkpoints back, checking every byte. Recovery
//! and the checkpoint's fold both use this.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Corruption, RecoverError};
use crate::format::{
    crc, parse_frame_header, CHECKPOINT_HEADER_BYTES, CHECKPOINT_MAGIC, CHECKPOINT_TRAILER_BYTES,
    FORMAT_VERSION, FRAME_HEADER_BYTES, FRAME_OVERHEAD_BYTES, MAX_CHECKPOINT_ENTRY_BYTES,
    MAX_PAYLOAD_BYTES, SEGMENT_HEADER_BYTES, SEGMENT_MAGIC,
};
use crate::record::{Lsn, Record, RecoveredReactor, RowImage};

/// Read buffer: large enough for sequential throughput, small enough not
/// to matter next to the state being rebuilt.
const READ_BUFFER_BYTES: usize = 1 << 20;

/// One checkpoint frame's payload: a reactor's copy, or a further part of
/// its rows when one entry would exceed the frame limit. It carries what
/// an `Image` record cannot say: whether the copy is contiguous.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CheckpointEntry {
    pub reactor: Vec<u8>,
    pub t_version: u64,
    pub contiguous: bool,
    /// 0 starts the reactor; part n + 1 adds rows to part n.
    pub part: u32,
    pub rows: Vec<RowImage>,
}

/// A torn tail found in the last segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Torn {
    /// The file header itself is incomplete or zeros: the whole file goes.
    Header { file_bytes: u64 },
    /// The file is cut back to `offset`.
    Tail { offset: u64, bytes_dropped: u64 },
}

/// What scanning a segment found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentScan {
    /// The last frame's lsn, or `first_lsn - 1` when it has none.
    pub end_lsn: Lsn,
    pub frames: u64,
    /// The end of the last whole frame.
    pub valid_bytes: u64,
    pub torn: Option<Torn>,
}

struct Source<'a> {
    path: &'a Path,
    reader: BufReader<File>,
    hasher: Option<crc32fast::Hasher>,
}

impl Source<'_> {
    fn open(path: &Path) -> Result<(Source<'_>, u64), RecoverError> {
        let io_err = |source| RecoverError::Io {
            file: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        Ok((
            Source {
                path,
                reader: BufReader::with_capacity(READ_BUFFER_BYTES, file),
                hasher: None,
            },
            len,
        ))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), RecoverError> {
        self.reader
            .read_exact(buf)
            .map_err(|source| RecoverError::Io {
                file: self.path.to_path_buf(),
                source,
            })?;
        if let Some(h) = &mut self.hasher {
            h.update(buf);
        }
        Ok(())
    }

    /// Reads `n` more bytes (bounded by the file length the caller
    /// checked) and says whether all are zero.
    fn rest_is_zero(&mut self, mut n: u64) -> Result<bool, RecoverError> {
        let mut chunk = vec![0u8; 64 * 1024];
        let mut all_zero = true;
        while n > 0 {
            let take = n.min(chunk.len() as u64) as usize;
            self.read_exact(&mut chunk[..take])?;
            all_zero &= chunk[..take].iter().all(|&b| b == 0);
            n -= take as u64;
        }
        Ok(all_zero)
    }

    fn corrupt(&self, offset: u64, reason: Corruption) -> RecoverError {
        RecoverError::Corrupt {
            file: self.path.to_path_buf(),
            offset,
            reason,
        }
    }
}

fn check_magic(
    path: &Path,
    head: &[u8],
    magic: &'static [u8; 8],
    kind: &'static str,
) -> Result<(), RecoverError> {
    let n = head.len().min(8);
    if head[..n] != magic[..n] {
        return Err(RecoverError::BadMagic {
            file: path.to_path_buf(),
            kind,
            found: String::from_utf8_lossy(&head[..n]).into_owned(),
            expected: std::str::from_utf8(magic).unwrap_or("?"),
        });
    }
    Ok(())
}

fn check_version(path: &Path, head: &[u8]) -> Result<(), RecoverError> {
    let found = u16::from_le_bytes([head[8], head[9]]);
    if found > FORMAT_VERSION {
        return Err(RecoverError::UnsupportedVersion {
            file: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        });
    }
    Ok(())
}

/// Scans one segment, calling `apply` for every record with lsn >
/// `skip_upto`, in order. `name_lsn` is the first lsn its name promises.
/// A torn tail is tolerated only when `is_last`; it is reported, not cut
/// (the caller cuts it). Nothing is applied from a frame that fails its
/// checksum.
pub(crate) fn scan_segment(
    path: &Path,
    name_lsn: Lsn,
    is_last: bool,
    skip_upto: Lsn,
    apply: &mut dyn FnMut(Lsn, Record),
) -> Result<SegmentScan, RecoverError> {
    let (mut src, len) = Source::open(path)?;
    let empty = |torn| SegmentScan {
        end_lsn: name_lsn.saturating_sub(1),
        frames: 0,
        valid_bytes: 0,
        torn,
    };
    if len < SEGMENT_HEADER_BYTES {
        let mut head = vec![0u8; len as usize];
        src.read_exact(&mut head)?;
        if is_last {
            // The crash came while the header was being written.
            return Ok(empty(Some(Torn::Header { file_bytes: len })));
        }
        check_magic(path, &head, &SEGMENT_MAGIC, "log segment")?;
        return Err(src.corrupt(
            0,
            Corruption::TruncatedHeader {
                file_bytes: len,
                header_bytes: SEGMENT_HEADER_BYTES,
            },
        ));
    }
    let mut head = [0u8; SEGMENT_HEADER_BYTES as usize];
    src.read_exact(&mut head)?;
    if is_last && head.iter().all(|&b| b == 0) && src.rest_is_zero(len - SEGMENT_HEADER_BYTES)? {
        // A file the file system extended with zeros and nothing else.
        return Ok(empty(Some(Torn::Header { file_bytes: len })));
    }
    check_magic(path, &head, &SEGMENT_MAGIC, "log segment")?;
    check_version(path, &head)?;
    let stored = u32::from_le_bytes([head[18], head[19], head[20], head[21]]);
    if crc(&head[..18]) != stored {
        return Err(src.corrupt(0, Corruption::HeaderChecksum));
    }
    if head[8..10] == [0, 0] {
        return Err(src.corrupt(0, Corruption::UnknownVersion));
    }
    let mut first = [0u8; 8];
    first.copy_from_slice(&head[10..18]);
    let header_lsn = u64::from_le_bytes(first);
    if header_lsn != name_lsn {
        return Err(src.corrupt(
            10,
            Corruption::NameMismatch {
                name_lsn,
                header_lsn,
            },
        ));
    }

    let mut offset = SEGMENT_HEADER_BYTES;
    let mut expected = name_lsn;
    let mut frames = 0u64;
    let mut payload = Vec::new();
    let torn_at = |offset: u64| {
        Some(Torn::Tail {
            offset,
            bytes_dropped: len - offset,
        })
    };
    // Bounded: every pass consumes at least a frame's overhead or returns.
    while offset < len {
        let remaining = len - offset;
        if remaining < FRAME_HEADER_BYTES {
            if is_last {
                return Ok(scan_result(expected, frames, offset, torn_at(offset)));
            }
            return Err(src.corrupt(
                offset,
                Corruption::FrameTruncated {
                    frame_bytes: FRAME_HEADER_BYTES,
                    remaining_bytes: remaining,
                },
            ));
        }
        let mut fh = [0u8; FRAME_HEADER_BYTES as usize];
        src.read_exact(&mut fh)?;
        let Some(header) = parse_frame_header(&fh) else {
            if is_last
                && fh.iter().all(|&b| b == 0)
                && src.rest_is_zero(remaining - FRAME_HEADER_BYTES)?
            {
                return Ok(scan_result(expected, frames, offset, torn_at(offset)));
            }
            return Err(src.corrupt(offset, Corruption::FrameHeaderChecksum));
        };
        if header.payload_bytes > MAX_PAYLOAD_BYTES {
            return Err(src.corrupt(
                offset,
                Corruption::FrameTooLarge {
                    payload_bytes: header.payload_bytes,
                    max_bytes: MAX_PAYLOAD_BYTES,
                },
            ));
        }
        let frame_bytes = FRAME_OVERHEAD_BYTES + header.payload_bytes;
        if frame_bytes > remaining {
            if is_last {
                return Ok(scan_result(expected, frames, offset, torn_at(offset)));
            }
            return Err(src.corrupt(
                offset,
                Corruption::FrameTruncated {
                    frame_bytes,
                    remaining_bytes: remaining,
                },
            ));
        }
        if header.lsn != expected {
            return Err(src.corrupt(
                offset,
                Corruption::LsnGap {
                    expected,
                    found: header.lsn,
                },
            ));
        }
        let mut pc = [0u8; 4];
        src.read_exact(&mut pc)?;
        // Bounded by MAX_PAYLOAD_BYTES and by the file's length (checked above).
        payload.resize(header.payload_bytes as usize, 0);
        src.read_exact(&mut payload)?;
        if crc(&payload) != u32::from_le_bytes(pc) {
            if is_last && frame_bytes == remaining {
                // The last frame's payload was not all written.
                return Ok(scan_result(expected, frames, offset, torn_at(offset)));
            }
            return Err(src.corrupt(offset, Corruption::PayloadChecksum));
        }
        let record: Record = postcard::from_bytes(&payload).map_err(|e| {
            src.corrupt(
                offset,
                Corruption::Undecodable {
                    cause: e.to_string(),
                },
            )
        })?;
        if header.lsn > skip_upto {
            apply(header.lsn, record);
        }
        frames += 1;
        expected += 1;
        offset += frame_bytes;
    }
    debug_assert_eq!(offset, len);
    Ok(scan_result(expected, frames, offset, None))
}

fn scan_result(next: Lsn, frames: u64, valid_bytes: u64, torn: Option<Torn>) -> SegmentScan {
    SegmentScan {
        end_lsn: next - 1,
        frames,
        valid_bytes,
        torn,
    }
}

/// A loaded checkpoint: its reactors, ready to become the recovered state.
pub(crate) struct LoadedCheckpoint {
    pub reactors: BTreeMap<Vec<u8>, RecoveredReactor>,
}

/// Reads and checks a whole checkpoint. Nothing is returned unless every
/// frame and the trailer check out.
pub(crate) fn read_checkpoint(
    path: &Path,
    name_lsn: Lsn,
) -> Result<LoadedCheckpoint, RecoverError> {
    let (mut src, len) = Source::open(path)?;
    let head_len = len.min(CHECKPOINT_HEADER_BYTES) as usize;
    let mut head = vec![0u8; head_len];
    src.hasher = Some(crc32fast::Hasher::new());
    src.read_exact(&mut head)?;
    check_magic(path, &head, &CHECKPOINT_MAGIC, "checkpoint")?;
    if head.len() >= 10 {
        check_version(path, &head)?;
    }
    if len < CHECKPOINT_HEADER_BYTES + CHECKPOINT_TRAILER_BYTES {
        return Err(src.corrupt(
            0,
            Corruption::TruncatedHeader {
                file_bytes: len,
                header_bytes: CHECKPOINT_HEADER_BYTES + CHECKPOINT_TRAILER_BYTES,
            },
        ));
    }
    let mut covered = [0u8; 8];
    covered.copy_from_slice(&head[10..18]);
    let covered = u64::from_le_bytes(covered);
    let body_end = len - CHECKPOINT_TRAILER_BYTES;

    let mut reactors: BTreeMap<Vec<u8>, RecoveredReactor> = BTreeMap::new();
    // The reactor and part of the previous entry, for continuation parts.
    let mut previous: Option<(Vec<u8>, u32)> = None;
    let mut offset = CHECKPOINT_HEADER_BYTES;
    let mut payload = Vec::new();
    // Bounded: every pass consumes at least a frame's overhead or returns.
    while offset < body_end {
        let remaining = body_end - offset;
        if remaining < FRAME_OVERHEAD_BYTES {
            return Err(src.corrupt(
                offset,
                Corruption::FrameTruncated {
                    frame_bytes: FRAME_OVERHEAD_BYTES,
                    remaining_bytes: remaining,
                },
            ));
        }
        let mut fh = [0u8; FRAME_HEADER_BYTES as usize];
        src.read_exact(&mut fh)?;
        let header = parse_frame_header(&fh)
            .ok_or_else(|| src.corrupt(offset, Corruption::FrameHeaderChecksum))?;
        if header.payload_bytes > MAX_CHECKPOINT_ENTRY_BYTES {
            return Err(src.corrupt(
                offset,
                Corruption::FrameTooLarge {
                    payload_bytes: header.payload_bytes,
                    max_bytes: MAX_CHECKPOINT_ENTRY_BYTES,
                },
            ));
        }
        let frame_bytes = FRAME_OVERHEAD_BYTES + header.payload_bytes;
        if frame_bytes > remaining {
            return Err(src.corrupt(
                offset,
                Corruption::FrameTruncated {
                    frame_bytes,
                    remaining_bytes: remaining,
                },
            ));
        }
        // Every frame of a checkpoint carries the lsn it covers.
        if header.lsn != covered {
            return Err(src.corrupt(
                offset,
                Corruption::LsnGap {
                    expected: covered,
                    found: header.lsn,
                },
            ));
        }
        let mut pc = [0u8; 4];
        src.read_exact(&mut pc)?;
        payload.resize(header.payload_bytes as usize, 0);
        src.read_exact(&mut payload)?;
        if crc(&payload) != u32::from_le_bytes(pc) {
            return Err(src.corrupt(offset, Corruption::PayloadChecksum));
        }
        let entry: CheckpointEntry = postcard::from_bytes(&payload).map_err(|e| {
            src.corrupt(
                offset,
                Corruption::Undecodable {
                    cause: e.to_string(),
                },
            )
        })?;
        let continues = matches!(&previous, Some((r, p)) if *r == entry.reactor && p.checked_add(1) == Some(entry.part));
        let copy = if entry.part == 0 {
            if reactors.contains_key(&entry.reactor) {
                return Err(src.corrupt(offset, Corruption::DuplicateReactor));
            }
            reactors
                .entry(entry.reactor.clone())
                .or_insert(RecoveredReactor {
                    t_version: entry.t_version,
                    rows: BTreeMap::new(),
                    contiguous: entry.contiguous,
                })
        } else if continues {
            match reactors.get_mut(&entry.reactor) {
                Some(copy) => copy,
                None => {
                    return Err(src.corrupt(
                        offset,
                        Corruption::EntryOutOfOrder {
                            part: entry.part,
                            previous: None,
                        },
                    ))
                }
            }
        } else {
            return Err(src.corrupt(
                offset,
                Corruption::EntryOutOfOrder {
                    part: entry.part,
                    previous: previous.map(|(_, p)| p),
                },
            ));
        };
        for row in entry.rows {
            copy.rows.insert((row.relation, row.key), row.value);
        }
        previous = Some((entry.reactor, entry.part));
        offset += frame_bytes;
    }
    debug_assert_eq!(offset, body_end);
    let computed = src.hasher.take().map(|h| h.finalize()).unwrap_or_default();
    let mut trailer = [0u8; CHECKPOINT_TRAILER_BYTES as usize];
    src.read_exact(&mut trailer)?;
    let mut count = [0u8; 8];
    count.copy_from_slice(&trailer[..8]);
    let count = u64::from_le_bytes(count);
    let stored = u32::from_le_bytes([trailer[8], trailer[9], trailer[10], trailer[11]]);
    if stored != computed {
        return Err(src.corrupt(body_end, Corruption::TrailerChecksum { stored, computed }));
    }
    // The checksum covered the header: now its lsn and version are trusted.
    if head[8..10] == [0, 0] {
        return Err(src.corrupt(0, Corruption::UnknownVersion));
    }
    if covered != name_lsn {
        return Err(src.corrupt(
            10,
            Corruption::NameMismatch {
                name_lsn,
                header_lsn: covered,
            },
        ));
    }
    if count != reactors.len() as u64 {
        return Err(src.corrupt(
            body_end,
            Corruption::ReactorCount {
                trailer: count,
                found: reactors.len() as u64,
            },
        ));
    }
    Ok(LoadedCheckpoint { reactors })
}

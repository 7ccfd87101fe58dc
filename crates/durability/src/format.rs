//! The on-disk layout: file names, headers and frames (see the crate's
//! documentation for the whole picture). Public so that tests and tools
//! can find frame boundaries without re-deriving the numbers.

use std::path::{Path, PathBuf};

use crate::record::Lsn;

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 1;

/// Magic at the start of a log segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"ROOSTWAL";
/// Magic at the start of a checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"ROOSTCKP";

/// Segment header: magic, version u16, first lsn u64, crc32 of the 18
/// bytes before it.
pub const SEGMENT_HEADER_BYTES: u64 = 8 + 2 + 8 + 4;
/// Checkpoint header: magic, version u16, covered lsn u64 (the trailer's
/// crc covers it).
pub const CHECKPOINT_HEADER_BYTES: u64 = 8 + 2 + 8;
/// Checkpoint trailer: reactor count u64, crc32 of every byte before it.
pub const CHECKPOINT_TRAILER_BYTES: u64 = 8 + 4;

/// Frame header: payload length u32, lsn u64, crc32 of those 12 bytes.
pub const FRAME_HEADER_BYTES: u64 = 4 + 8 + 4;
/// Header plus the payload's crc32: a frame is this many bytes plus its
/// payload.
pub const FRAME_OVERHEAD_BYTES: u64 = FRAME_HEADER_BYTES + 4;

/// The largest record payload the log accepts (a larger length in a frame
/// header with a good checksum is corruption).
pub const MAX_PAYLOAD_BYTES: u64 = 64 * 1024 * 1024;
/// The largest checkpoint entry: one row may be as large as a record, and
/// an entry adds the reactor's version and flags to it.
pub const MAX_CHECKPOINT_ENTRY_BYTES: u64 = MAX_PAYLOAD_BYTES + 64 * 1024;

const SEGMENT_PREFIX: &str = "log-";
const SEGMENT_SUFFIX: &str = ".wal";
const CHECKPOINT_PREFIX: &str = "checkpoint-";
const CHECKPOINT_SUFFIX: &str = ".ckpt";
/// Suffix of files being written; leftovers are removed at open.
pub const TMP_SUFFIX: &str = ".tmp";

/// `log-<first lsn, 20 digits>.wal`
pub fn segment_file_name(first_lsn: Lsn) -> String {
    format!("{SEGMENT_PREFIX}{first_lsn:020}{SEGMENT_SUFFIX}")
}

/// `checkpoint-<covered lsn, 20 digits>.ckpt`
pub fn checkpoint_file_name(covered_lsn: Lsn) -> String {
    format!("{CHECKPOINT_PREFIX}{covered_lsn:020}{CHECKPOINT_SUFFIX}")
}

/// What a file name in the log directory says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Segment(Lsn),
    Checkpoint(Lsn),
    Tmp,
}

/// Parses a directory entry's name; `None` for files that are not ours.
pub fn parse_file_name(name: &str) -> Option<FileKind> {
    if name.ends_with(TMP_SUFFIX)
        && (name.starts_with(SEGMENT_PREFIX) || name.starts_with(CHECKPOINT_PREFIX))
    {
        return Some(FileKind::Tmp);
    }
    let digits = |s: &str, prefix: &str, suffix: &str| -> Option<Lsn> {
        let d = s.strip_prefix(prefix)?.strip_suffix(suffix)?;
        if d.len() != 20 || !d.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        d.parse().ok()
    };
    // Lsns start at 1: a segment "starting at 0" was never written by a
    // log, so it is not ours (and never deleted as a leftover).
    if let Some(lsn) = digits(name, SEGMENT_PREFIX, SEGMENT_SUFFIX).filter(|&l| l > 0) {
        return Some(FileKind::Segment(lsn));
    }
    digits(name, CHECKPOINT_PREFIX, CHECKPOINT_SUFFIX).map(FileKind::Checkpoint)
}

/// `path` with `.tmp` appended.
pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(TMP_SUFFIX);
    PathBuf::from(s)
}

pub(crate) fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

pub(crate) fn segment_header(first_lsn: Lsn) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut h = [0u8; SEGMENT_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[10..18].copy_from_slice(&first_lsn.to_le_bytes());
    let c = crc(&h[0..18]);
    h[18..22].copy_from_slice(&c.to_le_bytes());
    h
}

pub(crate) fn checkpoint_header(covered_lsn: Lsn) -> [u8; CHECKPOINT_HEADER_BYTES as usize] {
    let mut h = [0u8; CHECKPOINT_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(&CHECKPOINT_MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[10..18].copy_from_slice(&covered_lsn.to_le_bytes());
    h
}

/// Appends one frame (`payload` at `lsn`) to `out`.
pub(crate) fn push_frame(out: &mut Vec<u8>, lsn: Lsn, payload: &[u8]) {
    debug_assert!(payload.len() as u64 <= MAX_CHECKPOINT_ENTRY_BYTES);
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let start = out.len();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    let hc = crc(&out[start..start + 12]);
    out.extend_from_slice(&hc.to_le_bytes());
    out.extend_from_slice(&crc(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// A frame header that passed its checksum.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameHeader {
    pub payload_bytes: u64,
    pub lsn: Lsn,
}

/// Checks and parses a frame header; `None` when its checksum fails.
pub(crate) fn parse_frame_header(h: &[u8; FRAME_HEADER_BYTES as usize]) -> Option<FrameHeader> {
    let stored = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
    if crc(&h[0..12]) != stored {
        return None;
    }
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let mut lsn = [0u8; 8];
    lsn.copy_from_slice(&h[4..12]);
    Some(FrameHeader {
        payload_bytes: u64::from(len),
        lsn: u64::from_le_bytes(lsn),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_file_name(7), "log-00000000000000000007.wal");
        assert_eq!(
            parse_file_name(&segment_file_name(u64::MAX)),
            Some(FileKind::Segment(u64::MAX))
        );
        assert_eq!(
            parse_file_name(&checkpoint_file_name(42)),
            Some(FileKind::Checkpoint(42))
        );
        assert_eq!(
            parse_file_name("checkpoint-00000000000000000042.ckpt.tmp"),
            Some(FileKind::Tmp)
        );
        assert_eq!(parse_file_name("log-12.wal"), None);
        assert_eq!(parse_file_name(&segment_file_name(0)), None);
        assert_eq!(parse_file_name("log-0000000000000000000x.wal"), None);
        assert_eq!(parse_file_name("notes.tmp"), None);
    }

    #[test]
    fn frame_header_round_trip() {
        let mut out = Vec::new();
        push_frame(&mut out, 9, b"hello");
        assert_eq!(out.len() as u64, FRAME_OVERHEAD_BYTES + 5);
        let mut h = [0u8; FRAME_HEADER_BYTES as usize];
        h.copy_from_slice(&out[..FRAME_HEADER_BYTES as usize]);
        let parsed = parse_frame_header(&h).expect("good header");
        assert_eq!((parsed.payload_bytes, parsed.lsn), (5, 9));
        h[5] ^= 1;
        assert!(parse_frame_header(&h).is_none());
    }
}

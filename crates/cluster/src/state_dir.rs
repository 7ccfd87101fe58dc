//! A node's state directory: where the peer membership's
//! [`AcceptorRecord`] lives between processes (the runtime's side of
//! [`crate::membership`]'s stable storage).
//!
//! * `membership.acceptor`: the record ([`crate::record`]'s encoding). It is
//!   replaced whole: written to `membership.acceptor.tmp`, fsynced, renamed
//!   over the old one, and the directory fsynced, so a crash leaves either
//!   the old record or the new one, never half of one.
//! * `lock`: held (`flock`) while a process uses the directory, so two
//!   processes of one node (or two nodes given one directory) cannot both
//!   vote from it.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::io::AsRawFd as _;
use std::path::{Path, PathBuf};

use roost_net::NodeId;
use thiserror::Error;

use crate::membership::AcceptorRecord;
use crate::record::{self, RecordError};

/// The record's file name in the directory.
pub const RECORD_FILE: &str = "membership.acceptor";
const TEMP_FILE: &str = "membership.acceptor.tmp";
const LOCK_FILE: &str = "lock";

/// Why a state directory cannot be used.
#[derive(Debug, Error)]
pub enum StateDirError {
    #[error("state directory {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("state directory {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("state directory {0} is in use by another process")]
    InUse(PathBuf),
    #[error(
        "state directory {path}: {RECORD_FILE} is unusable: {source} (it holds this node's \
         membership votes; move it away only if every node's state starts over)"
    )]
    Corrupt { path: PathBuf, source: RecordError },
}

/// An open, locked state directory.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    /// Held for the life of this value (the lock goes with the descriptor).
    _lock: File,
}

fn io(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> StateDirError {
    let path = path.to_owned();
    move |source| StateDirError::Io { path, what, source }
}

/// Writes `bytes` to `dir/name` and makes the file's contents durable.
fn write_synced(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StateDirError> {
    let mut file = File::create(dir.join(name)).map_err(io(dir, "creating the temporary file"))?;
    file.write_all(bytes)
        .map_err(io(dir, "writing the temporary file"))?;
    file.sync_all()
        .map_err(io(dir, "syncing the temporary file"))
}

/// Makes the directory's entries (a rename, a removal) durable.
fn sync_dir(dir: &Path) -> Result<(), StateDirError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "syncing the directory"))
}

impl StateDir {
    /// Opens `path` for node `me` of `nodes` (creating it if missing), takes
    /// its lock, checks that it can be written, and reads the record a
    /// previous process left (`None` if there is none). A record that is
    /// there but unreadable is an error, never taken for none.
    pub fn open(
        path: &Path,
        me: NodeId,
        nodes: &[NodeId],
    ) -> Result<(StateDir, Option<AcceptorRecord>), StateDirError> {
        let dir = Self::lock(path)?;
        // A temporary file is what a crash during a write leaves: the
        // record it was replacing is still whole.
        match std::fs::remove_file(path.join(TEMP_FILE)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(path, "removing a stale temporary file")(e)),
        }
        // Fail at start, not at the first vote, if the disk refuses writes.
        write_synced(path, TEMP_FILE, b"")?;
        std::fs::remove_file(path.join(TEMP_FILE)).map_err(io(path, "removing the probe"))?;
        let recovered = match std::fs::read(path.join(RECORD_FILE)) {
            Ok(bytes) => Some(record::decode(&bytes, me, nodes).map_err(|source| {
                StateDirError::Corrupt {
                    path: path.to_owned(),
                    source,
                }
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(path, "reading the record")(e)),
        };
        Ok((dir, recovered))
    }

    /// Removes the record: this node starts over (every node's must, for a
    /// new cluster; one node's alone loses its votes, and its heir then
    /// votes only as itself). Fails if a process holds the directory.
    pub fn reset(path: &Path) -> Result<(), StateDirError> {
        let _dir = Self::lock(path)?;
        for name in [RECORD_FILE, TEMP_FILE] {
            match std::fs::remove_file(path.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(path, "removing the record")(e)),
            }
        }
        sync_dir(path)
    }

    fn lock(path: &Path) -> Result<StateDir, StateDirError> {
        if path.exists() && !path.is_dir() {
            return Err(StateDirError::NotADirectory(path.to_owned()));
        }
        std::fs::create_dir_all(path).map_err(io(path, "creating it"))?;
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path.join(LOCK_FILE))
            .map_err(io(path, "opening the lock file"))?;
        // SAFETY: flock(2) on a descriptor this function owns; no memory is involved.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::WouldBlock {
                return Err(StateDirError::InUse(path.to_owned()));
            }
            return Err(io(path, "locking it")(error));
        }
        Ok(StateDir {
            path: path.to_owned(),
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the record with `record`, durably, before returning.
    pub fn store(&mut self, record: &AcceptorRecord) -> Result<(), StateDirError> {
        write_synced(&self.path, TEMP_FILE, &record::encode(record))?;
        std::fs::rename(self.path.join(TEMP_FILE), self.path.join(RECORD_FILE))
            .map_err(io(&self.path, "renaming the new record into place"))?;
        sync_dir(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::Ballot;

    const NODES: [NodeId; 3] = [NodeId(0), NodeId(1), NodeId(2)];

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("roost-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_stored_record_is_recovered_by_the_next_process() {
        let path = scratch("recover");
        let (mut dir, recovered) = StateDir::open(&path, NodeId(1), &NODES).unwrap();
        assert_eq!(recovered, None);
        let mut record = AcceptorRecord::empty(NodeId(1));
        record.promised = Ballot {
            round: 3,
            node: NodeId(0),
        };
        dir.store(&record).unwrap();
        record.proposed_round = 4;
        dir.store(&record).unwrap();
        // The lock is held while the directory is open.
        assert!(matches!(
            StateDir::open(&path, NodeId(1), &NODES),
            Err(StateDirError::InUse(_))
        ));
        assert!(matches!(
            StateDir::reset(&path),
            Err(StateDirError::InUse(_))
        ));
        drop(dir);
        // A crash mid-write leaves a temporary file: ignored, the record stands.
        std::fs::write(path.join(TEMP_FILE), b"half a rec").unwrap();
        let (dir, recovered) = StateDir::open(&path, NodeId(1), &NODES).unwrap();
        assert_eq!(recovered, Some(record));
        assert!(!path.join(TEMP_FILE).exists());
        drop(dir);
        StateDir::reset(&path).unwrap();
        assert_eq!(StateDir::open(&path, NodeId(1), &NODES).unwrap().1, None);
        let _ = std::fs::remove_dir_all(&path);
    }

    #[test]
    fn bad_directories_and_records_are_clear_errors() {
        let path = scratch("bad");
        std::fs::create_dir_all(&path).unwrap();
        // Corrupt: flipped bytes, another node's record, an empty file.
        let record = AcceptorRecord::empty(NodeId(1));
        let mut bytes = record::encode(&record);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        for contents in [bytes, record::encode(&record), Vec::new()] {
            std::fs::write(path.join(RECORD_FILE), &contents).unwrap();
            let error = StateDir::open(&path, NodeId(2), &NODES).unwrap_err();
            assert!(matches!(error, StateDirError::Corrupt { .. }), "{error}");
            assert!(error.to_string().contains(RECORD_FILE), "{error}");
        }
        // A file where the directory should be.
        let file = path.join("plain");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            StateDir::open(&file, NodeId(1), &NODES),
            Err(StateDirError::NotADirectory(_))
        ));
        // Below a file: cannot be created.
        let error = StateDir::open(&file.join("sub"), NodeId(1), &NODES).unwrap_err();
        assert!(error.to_string().contains("creating it"), "{error}");
        let _ = std::fs::remove_dir_all(&path);
    }

    #[test]
    fn an_unwritable_directory_is_an_error_at_open() {
        use std::os::unix::fs::PermissionsExt as _;
        let path = scratch("readonly");
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join(LOCK_FILE), b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o500)).unwrap();
        let result = StateDir::open(&path, NodeId(1), &NODES);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        // Root may write anyway; everyone else must be refused.
        // SAFETY: geteuid(2) reads the process's effective user id only.
        if unsafe { libc::geteuid() } != 0 {
            let error = result.unwrap_err();
            assert!(error.to_string().contains("temporary file"), "{error}");
        }
        let _ = std::fs::remove_dir_all(&path);
    }
}

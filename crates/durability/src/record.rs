//! The records of the log and the fold that recovery (and the checkpoint,
//! and a test's model) applies them with.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The 1-based number of a record in this node's log. Consecutive: the
/// record after `n` is `n + 1`, across segments and checkpoints.
pub type Lsn = u64;

/// One row of a whole copy of a reactor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowImage {
    pub relation: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// One row a commit changed: `value: None` deletes the row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowDelta {
    pub relation: String,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// What the node logs. The log knows their meaning so that it can fold
/// them into checkpoints and hand the node its state back at recovery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A whole copy of a reactor installed here (created, moved here, a
    /// reader's copy): replaces what the node held of it.
    Image {
        reactor: Vec<u8>,
        t_version: u64,
        rows: Vec<RowImage>,
    },
    /// The rows one reliable commit changed in one reactor (this node
    /// owner or follower), at `t_version`.
    Delta {
        reactor: Vec<u8>,
        t_version: u64,
        rows: Vec<RowDelta>,
    },
    /// The node no longer holds a copy of the reactor.
    Drop { reactor: Vec<u8> },
}

impl Record {
    /// The reactor the record is about.
    pub fn reactor(&self) -> &[u8] {
        match self {
            Record::Image { reactor, .. }
            | Record::Delta { reactor, .. }
            | Record::Drop { reactor } => reactor,
        }
    }
}

/// What recovery knows of one reactor's copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveredReactor {
    /// The highest version of the reactor a logged record carried.
    pub t_version: u64,
    /// `(relation, key) → value`.
    pub rows: BTreeMap<(String, Vec<u8>), Vec<u8>>,
    /// False when the copy may lack a commit: it was built from deltas
    /// without an image first, or a delta's version skipped one. The node
    /// should then fetch a fresh image before serving the copy as current.
    pub contiguous: bool,
}

/// A torn write at the end of the last log segment that recovery cut away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedTail {
    /// The segment that was cut.
    pub file: PathBuf,
    /// Its new length: the end of its last whole frame.
    pub offset: u64,
    /// How many bytes were cut (a whole segment file when its header was
    /// torn).
    pub bytes_dropped: u64,
}

/// The state recovery rebuilt: the fold of the newest checkpoint and every
/// later record. `Recovered::default()` is the empty state, and
/// [`Recovered::apply`] is the fold (public so that a caller or a test can
/// keep a model of what the log should give back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    pub reactors: BTreeMap<Vec<u8>, RecoveredReactor>,
    /// The last record recovered (0: none ever).
    pub last_lsn: Lsn,
    /// The lsn the loaded checkpoint covers, if one was loaded.
    pub checkpoint_lsn: Option<Lsn>,
    /// Records replayed from segments (not counting the checkpoint's).
    pub records_replayed: u64,
    /// A torn tail cut from the last segment, if there was one.
    pub truncated_tail: Option<TruncatedTail>,
}

impl Recovered {
    /// Folds one record into the state (only `reactors` changes).
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Image {
                reactor,
                t_version,
                rows,
            } => {
                let copy = RecoveredReactor {
                    t_version: *t_version,
                    rows: rows
                        .iter()
                        .map(|r| ((r.relation.clone(), r.key.clone()), r.value.clone()))
                        .collect(),
                    contiguous: true,
                };
                self.reactors.insert(reactor.clone(), copy);
            }
            Record::Delta {
                reactor,
                t_version,
                rows,
            } => {
                let copy = match self.reactors.get_mut(reactor) {
                    Some(copy) => {
                        // A version that is not the next one means the copy
                        // may lack a commit in between (or repeats one).
                        if copy.t_version.checked_add(1) != Some(*t_version) {
                            copy.contiguous = false;
                        }
                        copy.t_version = copy.t_version.max(*t_version);
                        copy
                    }
                    None => self
                        .reactors
                        .entry(reactor.clone())
                        .or_insert(RecoveredReactor {
                            t_version: *t_version,
                            rows: BTreeMap::new(),
                            contiguous: false,
                        }),
                };
                for row in rows {
                    let key = (row.relation.clone(), row.key.clone());
                    match &row.value {
                        Some(value) => {
                            copy.rows.insert(key, value.clone());
                        }
                        None => {
                            copy.rows.remove(&key);
                        }
                    }
                }
            }
            Record::Drop { reactor } => {
                self.reactors.remove(reactor);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(t_version: u64, key: &[u8], value: Option<&[u8]>) -> Record {
        Record::Delta {
            reactor: b"r".to_vec(),
            t_version,
            rows: vec![RowDelta {
                relation: "t".into(),
                key: key.to_vec(),
                value: value.map(<[u8]>::to_vec),
            }],
        }
    }

    #[test]
    fn fold_rules() {
        let mut s = Recovered::default();
        s.apply(&delta(5, b"a", Some(b"1")));
        let r = &s.reactors[b"r".as_slice()];
        assert!(!r.contiguous, "a delta without an image is not contiguous");
        assert_eq!(r.t_version, 5);
        s.apply(&Record::Image {
            reactor: b"r".to_vec(),
            t_version: 7,
            rows: vec![RowImage {
                relation: "t".into(),
                key: b"b".to_vec(),
                value: b"2".to_vec(),
            }],
        });
        let r = &s.reactors[b"r".as_slice()];
        assert!(r.contiguous);
        assert_eq!(r.rows.len(), 1, "an image replaces the rows");
        s.apply(&delta(8, b"c", Some(b"3")));
        s.apply(&delta(9, b"b", None));
        let r = &s.reactors[b"r".as_slice()];
        assert!(r.contiguous);
        assert_eq!(r.t_version, 9);
        assert_eq!(r.rows.len(), 1);
        s.apply(&delta(11, b"c", None));
        let r = &s.reactors[b"r".as_slice()];
        assert!(!r.contiguous, "version 10 is missing");
        assert_eq!(r.t_version, 11);
        s.apply(&delta(3, b"d", Some(b"4")));
        assert_eq!(s.reactors[b"r".as_slice()].t_version, 11, "max, never back");
        s.apply(&Record::Drop {
            reactor: b"r".to_vec(),
        });
        assert!(s.reactors.is_empty());
    }
}

//! Helpers shared by the integration tests: scratch directories, random
//! records, and reading frame boundaries off a segment.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore};
use roost_durability::format::{FRAME_OVERHEAD_BYTES, SEGMENT_HEADER_BYTES};
use roost_durability::{Record, Recovered, RowDelta, RowImage};

/// A scratch directory under the target dir, removed on drop.
pub struct TestDir {
    pub path: PathBuf,
}

impl TestDir {
    pub fn new(name: &str) -> TestDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("roost-durability-tests")
            .join(format!("{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create the test directory");
        TestDir { path }
    }

    /// A fresh directory holding a copy of `self`'s files.
    pub fn copy(&self, name: &str) -> TestDir {
        let to = TestDir::new(name);
        for (_, path) in files(&self.path) {
            let name = path.file_name().expect("file name");
            fs::copy(&path, to.path.join(name)).expect("copy a log file");
        }
        to
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The directory's files, sorted by name.
pub fn files(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = fs::read_dir(dir)
        .expect("list the directory")
        .map(|e| {
            let e = e.expect("directory entry");
            (e.file_name().to_string_lossy().into_owned(), e.path())
        })
        .collect();
    out.sort();
    out
}

pub fn segments(dir: &Path) -> Vec<PathBuf> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.starts_with("log-") && n.ends_with(".wal"))
        .map(|(_, p)| p)
        .collect()
}

pub fn checkpoints(dir: &Path) -> Vec<PathBuf> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.starts_with("checkpoint-") && n.ends_with(".ckpt"))
        .map(|(_, p)| p)
        .collect()
}

/// The segment's first lsn (from its name).
pub fn segment_first_lsn(path: &Path) -> u64 {
    let name = path.file_name().and_then(|n| n.to_str()).expect("name");
    name["log-".len().."log-".len() + 20]
        .parse()
        .expect("lsn digits")
}

/// Offsets where the segment's frames end: the header's end first, then
/// the end of every frame in order.
pub fn frame_boundaries(path: &Path) -> Vec<u64> {
    let bytes = fs::read(path).expect("read a segment");
    let mut out = vec![SEGMENT_HEADER_BYTES];
    let mut at = SEGMENT_HEADER_BYTES as usize;
    while at + 4 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as u64;
        let end = at as u64 + FRAME_OVERHEAD_BYTES + len;
        if end > bytes.len() as u64 {
            break;
        }
        out.push(end);
        at = end as usize;
    }
    out
}

const REACTORS: [&[u8]; 5] = [b"alpha", b"beta", b"gamma", b"delta", b"\x00\xffbin"];
const RELATIONS: [&str; 3] = ["accounts", "orders", "meta"];

fn bytes(rng: &mut SmallRng, max_len: usize) -> Vec<u8> {
    let mut v = vec![0u8; rng.random_range(0..=max_len)];
    rng.fill_bytes(&mut v);
    v
}

fn key(rng: &mut SmallRng) -> Vec<u8> {
    format!("k{}", rng.random_range(0..12u32)).into_bytes()
}

/// A random record; deltas mostly continue the model's version, sometimes
/// skip (a gap) or repeat one.
pub fn random_record(rng: &mut SmallRng, model: &Recovered, max_value_len: usize) -> Record {
    let reactor = REACTORS[rng.random_range(0..REACTORS.len())].to_vec();
    let current = model.reactors.get(&reactor).map_or(0, |r| r.t_version);
    match rng.random_range(0..20u32) {
        0 => Record::Drop { reactor },
        1..=4 => Record::Image {
            reactor,
            t_version: current + rng.random_range(1..3u64),
            rows: (0..rng.random_range(0..5usize))
                .map(|_| RowImage {
                    relation: RELATIONS[rng.random_range(0..RELATIONS.len())].to_string(),
                    key: key(rng),
                    value: bytes(rng, max_value_len),
                })
                .collect(),
        },
        _ => {
            let step = match rng.random_range(0..10u32) {
                0 => 2,
                1 => 0,
                _ => 1,
            };
            Record::Delta {
                reactor,
                t_version: current + step,
                rows: (0..rng.random_range(1..4usize))
                    .map(|_| RowDelta {
                        relation: RELATIONS[rng.random_range(0..RELATIONS.len())].to_string(),
                        key: key(rng),
                        value: if rng.random_bool(0.2) {
                            None
                        } else {
                            Some(bytes(rng, max_value_len))
                        },
                    })
                    .collect(),
            }
        }
    }
}

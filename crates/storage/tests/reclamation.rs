//! Epoch-based reclamation frees what transactions unlink: deleted records
//! and replaced overflow buffers. Measured by the process's resident memory
//! (this file is its own test binary, and its tests run one at a time), so a
//! leak of the records' memory cannot pass: each phase would leak hundreds of
//! MiB, the bound is a fraction of that. With the planted leak (deleted
//! records unlinked and never freed) the same check fails.

use std::sync::Mutex;

use roost_storage::{Engine, EngineConfig, PlantedBugs};

/// Records of this size (inline in their record; a whole page or two each).
const VALUE_BYTES: usize = 8 << 10;
/// Records inserted then deleted: 480 MiB of values if none were freed.
const CHURN: usize = 60_000;
/// Records alive at once during the churn.
const LIVE: usize = 64;
/// Growth allowed (allocator caches, deferred frees not yet run).
const BOUND_BYTES: u64 = 96 << 20;

/// One phase at a time: resident memory is the process's.
static ONE: Mutex<()> = Mutex::new(());

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

/// Inserts `CHURN` records of `VALUE_BYTES` and deletes each once `LIVE`
/// newer ones exist; returns the growth of resident memory.
fn churn_growth(planted: PlantedBugs) -> u64 {
    let engine = Engine::new(EngineConfig {
        planted_bugs: planted,
        ..EngineConfig::default()
    });
    let rel = engine.create_relation("churn").unwrap();
    let mut w = engine.worker();
    let value = vec![7u8; VALUE_BYTES];
    let before = resident_bytes();
    for i in 0..CHURN {
        let mut tx = w.begin();
        tx.insert(&rel, &(i as u64).to_be_bytes(), &value).unwrap();
        if i >= LIVE {
            assert!(tx.delete(&rel, &((i - LIVE) as u64).to_be_bytes()).unwrap());
        }
        tx.commit().unwrap();
    }
    assert_eq!(rel.index_len(), LIVE);
    resident_bytes().saturating_sub(before)
}

#[test]
fn deleted_records_are_freed() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let growth = churn_growth(PlantedBugs::default());
    println!(
        "resident growth after {CHURN} inserts and deletes: {} KiB",
        growth >> 10
    );
    assert!(
        growth < BOUND_BYTES,
        "{} MiB more resident memory: deleted records are not freed",
        growth >> 20
    );
}

#[test]
fn the_check_catches_records_never_freed() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let planted = PlantedBugs {
        leak_deleted_records: true,
        ..PlantedBugs::default()
    };
    let growth = churn_growth(planted);
    println!("with the planted leak: {} MiB", growth >> 20);
    assert!(
        growth >= BOUND_BYTES,
        "the planted leak went unnoticed: {} MiB",
        growth >> 20
    );
}

/// One record updated with values alternately too big for it (a new
/// overflow buffer) and small (inline: the buffer is retired).
#[test]
fn replaced_overflow_buffers_are_freed() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let engine = Engine::default();
    let rel = engine.create_relation("updates").unwrap();
    let mut w = engine.worker();
    let mut tx = w.begin();
    tx.insert(&rel, b"k", b"small").unwrap();
    tx.commit().unwrap();
    let big = vec![9u8; VALUE_BYTES];
    let before = resident_bytes();
    for i in 0..2 * CHURN {
        let mut tx = w.begin();
        let value: &[u8] = if i % 2 == 0 { &big } else { b"small" };
        tx.update(&rel, b"k", value).unwrap();
        tx.commit().unwrap();
    }
    let growth = resident_bytes().saturating_sub(before);
    println!(
        "resident growth after {CHURN} overflow buffers: {} KiB",
        growth >> 10
    );
    assert!(
        growth < BOUND_BYTES,
        "{} MiB more resident memory: replaced overflow buffers are not freed",
        growth >> 20
    );
}

//! Model-checks the commit core with loom: the TID word's lock, Silo's stable
//! (seqlock) read, and read validation after the commit fence. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p roost-storage --test loom_commit --release`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use roost_storage::tid::{commit_fence, Tid, TidWord, LATEST_BIT};

struct Record {
    tid: TidWord,
    value: AtomicU64,
}

impl Record {
    fn new() -> Arc<Self> {
        Arc::new(Record {
            tid: TidWord::new(Tid::new(1, 0, LATEST_BIT)),
            value: AtomicU64::new(0),
        })
    }

    fn read(&self) -> (Tid, u64) {
        self.tid.stable_read(|| self.value.load(Ordering::Relaxed))
    }
}

fn next_version(observed: Tid) -> Tid {
    Tid::new(1, observed.sequence() + 1, LATEST_BIT)
}

/// One Silo commit of a read-modify-write: lock, fence, validate, install.
fn increment(record: &Record, validate: bool) -> bool {
    let (observed, v) = record.read();
    let locked = record.tid.lock();
    commit_fence();
    if validate && !record.tid.validate(observed, true) {
        record.tid.unlock_to(locked);
        return false;
    }
    record.value.store(v + 1, Ordering::Relaxed);
    record.tid.unlock_to(next_version(locked));
    true
}

#[test]
fn stable_read_never_sees_a_torn_value() {
    loom::model(|| {
        let tid = Arc::new(TidWord::new(Tid::new(1, 0, LATEST_BIT)));
        let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let writer = {
            let (tid, words) = (tid.clone(), words.clone());
            thread::spawn(move || {
                let before = tid.lock();
                words[0].store(1, Ordering::Relaxed);
                words[1].store(1, Ordering::Relaxed);
                tid.unlock_to(next_version(before));
            })
        };
        let (seen, (a, b)) = tid.stable_read(|| {
            (
                words[0].load(Ordering::Relaxed),
                words[1].load(Ordering::Relaxed),
            )
        });
        assert_eq!(a, b, "torn read");
        assert_eq!(a, seen.sequence(), "value does not match its TID");
        writer.join().unwrap();
    });
}

#[test]
fn validated_increments_lose_nothing() {
    loom::model(|| {
        let record = Record::new();
        let other = {
            let record = record.clone();
            thread::spawn(move || increment(&record, true))
        };
        let mine = increment(&record, true);
        let theirs = other.join().unwrap();
        let committed = u64::from(mine) + u64::from(theirs);
        assert!(
            committed >= 1,
            "two conflicting increments cannot both abort"
        );
        assert_eq!(record.value.load(Ordering::Relaxed), committed);
    });
}

#[test]
#[should_panic(expected = "lost update")]
fn without_validation_loom_finds_the_lost_update() {
    loom::model(|| {
        let record = Record::new();
        let other = {
            let record = record.clone();
            thread::spawn(move || increment(&record, false))
        };
        let mine = increment(&record, false);
        let theirs = other.join().unwrap();
        assert_eq!(
            record.value.load(Ordering::Relaxed),
            u64::from(mine) + u64::from(theirs),
            "lost update"
        );
    });
}

/// T reads both records, writes `mine`; commits only if validation passes.
/// Returns (committed, the value it read from the other record).
fn read_both_write_one(mine: &Record, other: &Record) -> (bool, u64) {
    let (seen_mine, _) = mine.read();
    let (seen_other, other_value) = other.read();
    let locked = mine.tid.lock();
    commit_fence();
    let valid = mine.tid.validate(seen_mine, true) && other.tid.validate(seen_other, false);
    if !valid {
        mine.tid.unlock_to(locked);
        return (false, other_value);
    }
    mine.value.store(1, Ordering::Relaxed);
    mine.tid.unlock_to(next_version(locked));
    (true, other_value)
}

#[test]
fn crossing_committers_cannot_write_skew() {
    loom::model(|| {
        let (a, b) = (Record::new(), Record::new());
        let t2 = {
            let (a, b) = (a.clone(), b.clone());
            thread::spawn(move || read_both_write_one(&b, &a))
        };
        let (c1, saw_b) = read_both_write_one(&a, &b);
        let (c2, saw_a) = t2.join().unwrap();
        if c1 && c2 {
            assert!(
                saw_a == 1 || saw_b == 1,
                "both committed without seeing each other: write skew"
            );
        }
    });
}

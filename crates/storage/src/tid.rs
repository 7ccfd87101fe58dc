//! Silo's TID word (Tu et al. 2013, §4.2): one 64-bit word per record holding the
//! lock bit, the latest-version bit, the absent bit, a sequence number and an epoch.
//!
//! Layout, low bit first:
//!
//! | bits   | field    | meaning                                                    |
//! |--------|----------|------------------------------------------------------------|
//! | 0      | lock     | a committer holds the record (readers spin, validators abort) |
//! | 1      | latest   | the record is the live version reachable from its index      |
//! | 2      | absent   | the key is logically absent (placeholder insert or delete)   |
//! | 3..35  | sequence | orders TIDs within an epoch                                  |
//! | 35..64 | epoch    | Silo's global epoch at commit                                |
//!
//! Comparing `version()` values compares (epoch, sequence), which is all OCC needs.

use crate::sync::{fence, spin_hint, yield_now, AtomicU64, Ordering};

pub const LOCK_BIT: u64 = 1;
pub const LATEST_BIT: u64 = 1 << 1;
pub const ABSENT_BIT: u64 = 1 << 2;
pub const STATUS_MASK: u64 = LOCK_BIT | LATEST_BIT | ABSENT_BIT;
pub const SEQUENCE_SHIFT: u32 = 3;
pub const SEQUENCE_BITS: u32 = 32;
pub const EPOCH_SHIFT: u32 = SEQUENCE_SHIFT + SEQUENCE_BITS;
pub const EPOCH_BITS: u32 = 64 - EPOCH_SHIFT;
pub const MAX_EPOCH: u64 = (1 << EPOCH_BITS) - 1;

/// Spins before a waiter starts yielding its core; bounds the busy wait.
const SPINS_BEFORE_YIELD: u32 = 64;

/// A snapshot of a TID word.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Tid(u64);

impl Tid {
    /// The TID word of a fresh insert placeholder: absent, latest, version zero.
    pub const PLACEHOLDER: Tid = Tid(LATEST_BIT | ABSENT_BIT);

    pub const fn from_raw(raw: u64) -> Self {
        Tid(raw)
    }

    pub fn new(epoch: u64, sequence: u64, status: u64) -> Self {
        assert!(epoch <= MAX_EPOCH, "epoch {epoch} overflows the TID word");
        assert!(sequence < (1 << SEQUENCE_BITS));
        assert_eq!(status & !STATUS_MASK, 0);
        Tid((epoch << EPOCH_SHIFT) | (sequence << SEQUENCE_SHIFT) | status)
    }

    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The (epoch, sequence) part, without status bits.
    pub const fn version(self) -> u64 {
        self.0 & !STATUS_MASK
    }

    pub const fn epoch(self) -> u64 {
        self.0 >> EPOCH_SHIFT
    }

    pub const fn sequence(self) -> u64 {
        (self.0 >> SEQUENCE_SHIFT) & ((1 << SEQUENCE_BITS) - 1)
    }

    pub const fn is_locked(self) -> bool {
        self.0 & LOCK_BIT != 0
    }

    pub const fn is_latest(self) -> bool {
        self.0 & LATEST_BIT != 0
    }

    pub const fn is_absent(self) -> bool {
        self.0 & ABSENT_BIT != 0
    }

    pub const fn unlocked(self) -> Tid {
        Tid(self.0 & !LOCK_BIT)
    }

    /// A version word (from `version()`) with the given status bits.
    pub const fn with_status(version: u64, status: u64) -> Tid {
        Tid((version & !STATUS_MASK) | status)
    }
}

/// The atomic TID word itself.
#[derive(Debug)]
pub struct TidWord(AtomicU64);

impl TidWord {
    pub fn new(tid: Tid) -> Self {
        TidWord(AtomicU64::new(tid.0))
    }

    pub fn load(&self) -> Tid {
        Tid(self.0.load(Ordering::Acquire))
    }

    /// Takes the lock bit if it is free. Returns the unlocked word it replaced.
    pub fn try_lock(&self) -> Option<Tid> {
        let current = self.0.load(Ordering::Relaxed);
        if current & LOCK_BIT != 0 {
            return None;
        }
        match self.0.compare_exchange_weak(
            current,
            current | LOCK_BIT,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => {
                // Seqlock writer side: readers that see any value store made under
                // this lock must also see the lock bit on their second TID load.
                fence(Ordering::Release);
                Some(Tid(current))
            }
            Err(_) => None,
        }
    }

    /// Takes the lock bit, waiting for the holder. Committers lock in one global
    /// order (record address), so waiting cannot deadlock; holders never wait on
    /// anything but other locks later in that order.
    pub fn lock(&self) -> Tid {
        let mut spins = 0u32;
        loop {
            if let Some(tid) = self.try_lock() {
                return tid;
            }
            spins = spins.wrapping_add(1);
            backoff(spins);
        }
    }

    /// Releases the lock by publishing `tid` (which must not carry the lock bit).
    pub fn unlock_to(&self, tid: Tid) {
        debug_assert!(
            self.0.load(Ordering::Relaxed) & LOCK_BIT != 0,
            "unlock of a free TID word"
        );
        assert!(!tid.is_locked(), "unlock must publish an unlocked word");
        self.0.store(tid.0, Ordering::Release);
    }

    /// Silo's stable read: wait for the word to be unlocked, run `read` (which
    /// copies the record's value with relaxed atomic loads), and retry if the word
    /// changed meanwhile. Returns the TID the copy is consistent with.
    pub fn stable_read<R>(&self, mut read: impl FnMut() -> R) -> (Tid, R) {
        let mut spins = 0u32;
        loop {
            let before = self.0.load(Ordering::Acquire);
            if before & LOCK_BIT == 0 {
                let value = read();
                fence(Ordering::Acquire);
                let after = self.0.load(Ordering::Relaxed);
                if after == before {
                    return (Tid(before), value);
                }
            }
            spins = spins.wrapping_add(1);
            backoff(spins);
        }
    }

    /// Read-set validation (Silo phase 2): the word must carry the observed version
    /// and status, and must not be locked by another committer.
    pub fn validate(&self, observed: Tid, locked_by_me: bool) -> bool {
        let current = Tid(self.0.load(Ordering::Acquire));
        if current.is_locked() && !locked_by_me {
            return false;
        }
        current.unlocked() == observed.unlocked()
    }
}

/// Spin, then yield: bounded busy waiting (TigerBeetle style) without a lock-up
/// when the holder is descheduled on a two-core machine.
fn backoff(spins: u32) {
    if spins < SPINS_BEFORE_YIELD {
        spin_hint();
    } else {
        yield_now();
    }
}

/// The fence between Silo's phase 1 (lock the write set) and phase 2 (read the
/// epoch, validate the read set). It orders the lock stores before the
/// validation loads, which is what makes two crossing committers see each other.
pub fn commit_fence() {
    fence(Ordering::SeqCst);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let tid = Tid::new(7, 42, LATEST_BIT);
        assert_eq!(tid.epoch(), 7);
        assert_eq!(tid.sequence(), 42);
        assert!(tid.is_latest() && !tid.is_absent() && !tid.is_locked());
        assert!(Tid::new(8, 0, 0).version() > Tid::new(7, u32::MAX as u64, 0).version());
    }

    #[test]
    fn lock_excludes_and_unlock_publishes() {
        let word = TidWord::new(Tid::PLACEHOLDER);
        let before = word.try_lock().expect("free word locks");
        assert_eq!(before, Tid::PLACEHOLDER);
        assert!(word.try_lock().is_none());
        assert!(
            !word.validate(before, false),
            "locked by another fails validation"
        );
        assert!(word.validate(before, true), "locked by me passes");
        word.unlock_to(Tid::new(1, 1, LATEST_BIT));
        assert!(
            !word.validate(before, false),
            "a new version fails validation"
        );
    }
}

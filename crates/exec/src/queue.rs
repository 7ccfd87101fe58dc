//! The mailbox: a bounded lock-free queue with many producers and one
//! consumer (Vyukov's bounded array queue: a sequence number per slot says
//! whose turn the slot is). A push never blocks and never allocates; a full
//! queue answers `Err(value)` and the sender decides how to wait.

use std::mem::MaybeUninit;

use crate::sync::{Arc, AtomicUsize, Ordering, UnsafeCell};

/// Most slots one mailbox may have.
pub const MAX_CAPACITY: usize = 1 << 20;

struct Slot<T> {
    /// `position` when free for the push at `position`; `position + 1` once
    /// that push wrote its value; `position + capacity` after the pop.
    sequence: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// Pads a counter to its own cache line, so producers bumping the tail do
/// not slow the consumer reading the head.
#[repr(align(128))]
struct Padded(AtomicUsize);

struct Ring<T> {
    slots: Box<[Slot<T>]>,
    mask: usize,
    /// Next position to pop; written by the consumer only.
    head: Padded,
    /// Next position to push; claimed by producers with a compare-exchange.
    tail: Padded,
}

// SAFETY: a slot's value is written only by the producer that claimed its
// position and read only by the one consumer after the sequence number
// (release/acquire) published it; values cross threads, hence `T: Send`.
unsafe impl<T: Send> Send for Ring<T> {}
unsafe impl<T: Send> Sync for Ring<T> {}

/// The sending side; cheap to clone, usable from any thread.
pub struct Sender<T> {
    ring: Arc<Ring<T>>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender {
            ring: Arc::clone(&self.ring),
        }
    }
}

/// The one receiving side.
pub struct Receiver<T> {
    ring: Arc<Ring<T>>,
}

/// A queue of `capacity` slots (rounded up to a power of two, at least 2).
pub fn bounded<T: Send>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(
        (1..=MAX_CAPACITY).contains(&capacity),
        "mailbox capacity {capacity} outside 1..={MAX_CAPACITY}"
    );
    let capacity = capacity.next_power_of_two().max(2);
    let slots = (0..capacity)
        .map(|i| Slot {
            sequence: AtomicUsize::new(i),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        })
        .collect::<Box<[_]>>();
    let ring = Arc::new(Ring {
        slots,
        mask: capacity - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (
        Sender {
            ring: Arc::clone(&ring),
        },
        Receiver { ring },
    )
}

impl<T> Sender<T> {
    /// Appends `value`, or gives it back if the queue is full. Lock-free: a
    /// retry means another producer claimed the position first.
    pub fn push(&self, value: T) -> Result<(), T> {
        let ring = &*self.ring;
        let capacity = ring.mask + 1;
        let mut position = ring.tail.0.load(Ordering::Relaxed);
        loop {
            let slot = &ring.slots[position & ring.mask];
            let sequence = slot.sequence.load(Ordering::Acquire);
            if sequence == position {
                match ring.tail.0.compare_exchange_weak(
                    position,
                    position.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the compare-exchange gave this producer the
                        // slot's position; nobody else touches the value until
                        // the sequence below publishes it.
                        slot.value.with_mut(|v| unsafe { (*v).write(value) });
                        slot.sequence
                            .store(position.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(now) => position = now,
                }
            } else if (sequence.wrapping_sub(position) as isize) < 0 {
                // The slot still holds the value pushed one lap ago, at
                // `position - capacity`, whose push left `sequence` one above it.
                debug_assert_eq!(position.wrapping_sub(sequence), capacity - 1);
                return Err(value);
            } else {
                position = ring.tail.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Slots in the queue.
    pub fn capacity(&self) -> usize {
        self.ring.mask + 1
    }

    /// Values queued now (a snapshot; racing pushes and pops move it).
    pub fn len(&self) -> usize {
        let tail = self.ring.tail.0.load(Ordering::Relaxed);
        let head = self.ring.head.0.load(Ordering::Relaxed);
        tail.wrapping_sub(head).min(self.capacity())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Receiver<T> {
    /// Takes the oldest value, if its push has finished.
    pub fn pop(&mut self) -> Option<T> {
        let ring = &*self.ring;
        let position = ring.head.0.load(Ordering::Relaxed);
        let slot = &ring.slots[position & ring.mask];
        let sequence = slot.sequence.load(Ordering::Acquire);
        if sequence != position.wrapping_add(1) {
            return None;
        }
        // SAFETY: the sequence says the push at `position` wrote the value,
        // and this (only) consumer has not taken it yet.
        let value = slot.value.with_mut(|v| unsafe { (*v).assume_init_read() });
        slot.sequence
            .store(position.wrapping_add(ring.mask + 1), Ordering::Release);
        ring.head
            .0
            .store(position.wrapping_add(1), Ordering::Relaxed);
        Some(value)
    }

    /// Whether a value is ready to pop (the check before parking, after the
    /// sleeping flag was raised and fenced).
    pub fn has_ready(&self) -> bool {
        let ring = &*self.ring;
        let position = ring.head.0.load(Ordering::Relaxed);
        ring.slots[position & ring.mask]
            .sequence
            .load(Ordering::Acquire)
            == position.wrapping_add(1)
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // Values still queued are dropped with the receiver; later pushes
        // fill the ring and then fail as if full, and are dropped by their
        // senders. (Senders check the executor's closed flag first.)
        while self.pop().is_some() {}
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // Values pushed after the receiver's drain: still initialised.
        let head = self.head.0.load(Ordering::Relaxed);
        let tail = self.tail.0.load(Ordering::Relaxed);
        let mut position = head;
        while position != tail {
            let slot = &self.slots[position & self.mask];
            if slot.sequence.load(Ordering::Acquire) == position.wrapping_add(1) {
                // SAFETY: published and never popped; we are the last owner.
                slot.value.with_mut(|v| unsafe { (*v).assume_init_drop() });
            }
            position = position.wrapping_add(1);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_until_full_then_refuses() {
        let (tx, mut rx) = bounded::<u32>(4);
        for i in 0..4 {
            tx.push(i).unwrap();
        }
        assert_eq!(tx.push(9), Err(9));
        assert_eq!(tx.len(), 4);
        for i in 0..4 {
            assert_eq!(rx.pop(), Some(i));
        }
        assert_eq!(rx.pop(), None);
        // Laps around the ring.
        for lap in 0..10u32 {
            tx.push(lap).unwrap();
            assert!(rx.has_ready());
            assert_eq!(rx.pop(), Some(lap));
            assert!(!rx.has_ready());
        }
    }

    #[test]
    fn values_left_in_the_ring_are_dropped() {
        let value = std::sync::Arc::new(());
        let (tx, rx) = bounded(8);
        for _ in 0..5 {
            tx.push(std::sync::Arc::clone(&value)).unwrap();
        }
        drop(rx);
        tx.push(std::sync::Arc::clone(&value)).unwrap();
        drop(tx);
        assert_eq!(std::sync::Arc::strong_count(&value), 1);
    }

    #[test]
    fn many_producers_deliver_every_value_once() {
        const PER: u64 = 100_000;
        let (tx, mut rx) = bounded::<u64>(64);
        let producers: Vec<_> = (0..3u64)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        let mut v = p * PER + i;
                        while let Err(back) = tx.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut last = [None::<u64>; 3];
        let mut seen = 0;
        while seen < 3 * PER {
            if let Some(v) = rx.pop() {
                let p = (v / PER) as usize;
                // Per producer, values arrive in the order pushed.
                assert!(last[p].is_none_or(|l| l < v), "out of order");
                last[p] = Some(v);
                seen += 1;
            } else {
                std::thread::yield_now();
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(rx.pop(), None);
        assert_eq!(last, [Some(PER - 1), Some(2 * PER - 1), Some(3 * PER - 1)]);
    }
}

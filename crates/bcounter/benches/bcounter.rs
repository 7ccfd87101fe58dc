//! Microbenchmarks of the Bounded Counter's local operations as the replica
//! count grows (n = 3, 5, 16), full matrix vs compact representation:
//!
//! - `decrement`: a local decrement by 1 (reads row and column of `R`,
//!   writes `U[i]`);
//! - `transfer`: a transfer of 1 right to another replica;
//! - `merge`: merging another replica's message (a whole state for the full
//!   matrix, a ~2n delta for the compact form), already-seen content, so each
//!   iteration does the same work;
//! - `message`: building that message.
//!
//! `cargo bench -p roost-bcounter --bench bcounter` (add `-- --quick` for a
//! short run); `cargo test --all-targets` runs each once as a smoke test.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use roost_bcounter::{Bound, BoundedCounter, CompactRights, FullRights, ReplicaId, RightsState};

const REPLICA_COUNTS: [usize; 3] = [3, 5, 16];

/// Replica 0 holds (almost) all of `u64`'s rights, so no iteration count
/// runs it dry; the others have traded a little, so the matrices are not
/// all zero.
fn replicas<S: RightsState>(n: usize) -> Vec<BoundedCounter<S>> {
    let mut replicas: Vec<BoundedCounter<S>> = (0..n)
        .map(|me| {
            BoundedCounter::with_initial_value(
                Bound::Lower,
                i64::MIN,
                i64::MAX,
                ReplicaId(0),
                ReplicaId(me as u32),
                n,
            )
            .expect("valid configuration")
        })
        .collect();
    for to in 1..n {
        replicas[0].transfer(1_000, ReplicaId(to as u32)).unwrap();
    }
    for to in 1..n {
        let message = replicas[0].message_for(ReplicaId(to as u32)).unwrap();
        replicas[to].merge(&message).unwrap();
        replicas[to].decrement(10).unwrap();
        replicas[to].increment(3).unwrap();
    }
    for from in 1..n {
        let message = replicas[from].message_for(ReplicaId(0)).unwrap();
        replicas[0].merge(&message).unwrap();
    }
    replicas
}

fn bench_representation<S: RightsState>(c: &mut Criterion, label: &str) {
    for n in REPLICA_COUNTS {
        let replicas = replicas::<S>(n);
        let id = BenchmarkId::new(label, n);

        let mut counter = replicas[0].clone();
        c.benchmark_group("decrement")
            .bench_with_input(id.clone(), &n, |b, _| {
                b.iter(|| counter.decrement(black_box(1)).unwrap())
            });

        let mut counter = replicas[0].clone();
        let to = ReplicaId((n - 1) as u32);
        c.benchmark_group("transfer")
            .bench_with_input(id.clone(), &n, |b, _| {
                b.iter(|| counter.transfer(black_box(1), to).unwrap())
            });

        let mut counter = replicas[0].clone();
        let message = replicas[1].message_for(ReplicaId(0)).unwrap();
        c.benchmark_group("merge")
            .bench_with_input(id.clone(), &n, |b, _| {
                b.iter(|| counter.merge(black_box(&message)).unwrap())
            });

        let counter = replicas[0].clone();
        c.benchmark_group("message")
            .bench_with_input(id, &n, |b, _| {
                b.iter(|| counter.message_for(black_box(ReplicaId(1))).unwrap())
            });
    }
}

fn bcounter(c: &mut Criterion) {
    bench_representation::<FullRights>(c, "full");
    bench_representation::<CompactRights>(c, "compact");
}

criterion_group!(benches, bcounter);
criterion_main!(benches);

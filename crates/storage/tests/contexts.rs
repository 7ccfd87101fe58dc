//! Per-container contexts committed together (`commit_contexts`): atomic across
//! containers, and serializable under concurrency.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_storage::{
    commit_contexts, commit_contexts_sequenced, Engine, Guard, Relation, TxContext, TxError,
};

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn read(ctx: &mut TxContext, guard: &Guard, rel: &Arc<Relation>, k: u64) -> Result<i64, TxError> {
    // SAFETY: `guard` outlives the context's use in every test below.
    let v = unsafe {
        ctx.get_with(guard, rel, &key(k), |v| {
            i64::from_le_bytes(v.try_into().unwrap())
        })?
    };
    Ok(v.unwrap_or(0))
}

fn write(
    ctx: &mut TxContext,
    guard: &Guard,
    rel: &Arc<Relation>,
    k: u64,
    v: i64,
) -> Result<(), TxError> {
    // SAFETY: as above.
    unsafe { ctx.put(guard, rel, &key(k), &v.to_le_bytes()) }
}

#[test]
fn contexts_commit_atomically_or_not_at_all() {
    let engine = Engine::default();
    let (a, b) = (
        engine.create_relation("a").unwrap(),
        engine.create_relation("b").unwrap(),
    );
    let guard = Guard::new();
    let (mut ca, mut cb) = (TxContext::new(&engine), TxContext::new(&engine));
    write(&mut ca, &guard, &a, 1, 10).unwrap();
    write(&mut cb, &guard, &b, 1, 20).unwrap();
    // SAFETY: one guard for everything.
    unsafe { commit_contexts(&mut [&mut ca, &mut cb], &guard).unwrap() };
    assert!(
        ca.is_untouched() && cb.is_untouched(),
        "contexts are cleared for reuse"
    );

    // A transaction that reads in `a` and writes in `b` loses to a concurrent
    // writer of its read: neither part installs.
    assert_eq!(read(&mut ca, &guard, &a, 1).unwrap(), 10);
    write(&mut cb, &guard, &b, 1, 99).unwrap();
    let mut other = TxContext::new(&engine);
    write(&mut other, &guard, &a, 1, 11).unwrap();
    unsafe { commit_contexts(&mut [&mut other], &guard).unwrap() };
    assert!(unsafe { commit_contexts(&mut [&mut ca, &mut cb], &guard) }.is_err());
    assert_eq!(
        read(&mut ca, &guard, &b, 1).unwrap(),
        20,
        "the failed part installed nothing"
    );
    unsafe { ca.abort(&guard) };
}

/// Transfers between two relations (two containers), each side in its own
/// context on its own thread's guard, committed together; audits read both.
#[test]
fn cross_context_transfers_conserve_the_total() {
    const ACCOUNTS: u64 = 4;
    let engine = Engine::default();
    let (a, b) = (
        engine.create_relation("a").unwrap(),
        engine.create_relation("b").unwrap(),
    );
    {
        let guard = Guard::new();
        let (mut ca, mut cb) = (TxContext::new(&engine), TxContext::new(&engine));
        for k in 0..ACCOUNTS {
            write(&mut ca, &guard, &a, k, 100).unwrap();
            write(&mut cb, &guard, &b, k, 100).unwrap();
        }
        unsafe { commit_contexts(&mut [&mut ca, &mut cb], &guard).unwrap() };
    }
    let stop = AtomicBool::new(false);
    let bad_audits = AtomicU64::new(0);
    let commits = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (engine, a, b, stop, bad_audits, commits) =
                (&engine, &a, &b, &stop, &bad_audits, &commits);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let (mut ca, mut cb) = (TxContext::new(engine), TxContext::new(engine));
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_millis(1500)
                {
                    let guard = Guard::new();
                    let (ka, kb) = (rng.random_range(0..ACCOUNTS), rng.random_range(0..ACCOUNTS));
                    let audit = rng.random_ratio(1, 4);
                    let attempt = (|| -> Result<i64, TxError> {
                        if audit {
                            let mut total = 0;
                            for k in 0..ACCOUNTS {
                                total +=
                                    read(&mut ca, &guard, a, k)? + read(&mut cb, &guard, b, k)?;
                            }
                            return Ok(total);
                        }
                        let (x, y) = (read(&mut ca, &guard, a, ka)?, read(&mut cb, &guard, b, kb)?);
                        write(&mut ca, &guard, a, ka, x - 7)?;
                        write(&mut cb, &guard, b, kb, y + 7)?;
                        Ok(0)
                    })();
                    match attempt {
                        Ok(total) => {
                            if unsafe { commit_contexts(&mut [&mut ca, &mut cb], &guard) }.is_ok() {
                                commits.fetch_add(1, Ordering::Relaxed);
                                if audit && total != (2 * ACCOUNTS * 100) as i64 {
                                    bad_audits.fetch_add(1, Ordering::Relaxed);
                                    stop.store(true, Ordering::Relaxed);
                                }
                            }
                        }
                        Err(_) => unsafe {
                            ca.abort(&guard);
                            cb.abort(&guard);
                        },
                    }
                }
            });
        }
    });
    assert!(commits.load(Ordering::Relaxed) > 100);
    assert_eq!(
        bad_audits.load(Ordering::Relaxed),
        0,
        "an audit saw a partial transfer"
    );
    // Afterwards, one audit over both relations: the total is conserved.
    let guard = Guard::new();
    let (mut ca, mut cb) = (TxContext::new(&engine), TxContext::new(&engine));
    let total: i64 = (0..ACCOUNTS)
        .map(|k| read(&mut ca, &guard, &a, k).unwrap() + read(&mut cb, &guard, &b, k).unwrap())
        .sum();
    unsafe { commit_contexts(&mut [&mut ca, &mut cb], &guard) }.unwrap();
    assert_eq!(total, (2 * ACCOUNTS * 100) as i64, "the total moved");
}

/// A version word observed by a context (the reactor layer's placement
/// slot) is validated at commit like a record read: changed, the commit
/// fails and installs nothing, read-only or not; unchanged, it commits.
#[test]
fn an_observed_version_word_is_validated_at_commit() {
    use roost_storage::ConflictKind;
    let engine = Engine::default();
    let rel = engine.create_relation("r").unwrap();
    let guard = Guard::new();
    let word = AtomicU64::new(7);
    let mut ctx = TxContext::new(&engine);
    // SAFETY: `word` outlives every context below.
    unsafe { ctx.observe_version(&word, 7) };
    assert!(!ctx.is_untouched());
    write(&mut ctx, &guard, &rel, 1, 5).unwrap();
    // SAFETY: one guard for everything.
    unsafe { commit_contexts(&mut [&mut ctx], &guard).unwrap() };
    for read_only in [false, true] {
        unsafe { ctx.observe_version(&word, 7) };
        if read_only {
            assert_eq!(read(&mut ctx, &guard, &rel, 1).unwrap(), 5);
        } else {
            write(&mut ctx, &guard, &rel, 1, 6).unwrap();
        }
        word.store(8, Ordering::SeqCst);
        assert_eq!(
            conflict_kind(unsafe { commit_contexts(&mut [&mut ctx], &guard) }.unwrap_err()),
            ConflictKind::ReadValidation
        );
        word.store(7, Ordering::SeqCst);
        assert!(ctx.is_untouched(), "aborted and cleared");
    }
    assert_eq!(
        read(&mut ctx, &guard, &rel, 1).unwrap(),
        5,
        "nothing installed"
    );
    unsafe { commit_contexts(&mut [&mut ctx], &guard).unwrap() };
}

/// A write as `commit_contexts_sequenced` captured it: relation name, full
/// key, value (`None`: deleted).
type Captured = (String, Vec<u8>, Option<Vec<u8>>);

/// Commits `contexts` sequenced, collecting the captured writes.
///
/// # Safety
/// As `commit_contexts`.
unsafe fn commit_capturing(
    contexts: &mut [&mut TxContext],
    guard: &Guard,
    sequencer: &AtomicU64,
) -> (Option<u64>, bool, Vec<Captured>) {
    let mut captured = Vec::new();
    let (seq, result) = unsafe {
        commit_contexts_sequenced(contexts, guard, sequencer, &mut |rel, key, value| {
            captured.push((
                rel.name().to_owned(),
                key.to_vec(),
                value.map(<[u8]>::to_vec),
            ))
        })
    };
    assert!(
        result.is_ok() || captured.is_empty(),
        "nothing is captured for an abort"
    );
    (seq, result.is_ok(), captured)
}

/// Numbers go to commits with writes only, from 1 up, and the writes
/// arrive as installed: puts and placeholder inserts with their value,
/// deletes (also of a key inserted in the same transaction) as `None`.
#[test]
fn sequenced_commits_number_writers_and_capture_their_writes() {
    let engine = Engine::default();
    let (a, b) = (
        engine.create_relation("a").unwrap(),
        engine.create_relation("b").unwrap(),
    );
    let sequencer = AtomicU64::new(0);
    let guard = Guard::new();
    let (mut ca, mut cb) = (TxContext::new(&engine), TxContext::new(&engine));
    write(&mut ca, &guard, &a, 1, 10).unwrap();
    write(&mut ca, &guard, &a, 2, 20).unwrap();
    // SAFETY (here and below): one guard for everything.
    unsafe { ca.insert(&guard, &b, &key(3), b"new").unwrap() };
    let (seq, ok, mut captured) =
        unsafe { commit_capturing(&mut [&mut ca, &mut cb], &guard, &sequencer) };
    assert_eq!((seq, ok), (Some(1), true));
    captured.sort();
    assert_eq!(
        captured,
        vec![
            (
                "a".into(),
                key(1).to_vec(),
                Some(10i64.to_le_bytes().to_vec())
            ),
            (
                "a".into(),
                key(2).to_vec(),
                Some(20i64.to_le_bytes().to_vec())
            ),
            ("b".into(), key(3).to_vec(), Some(b"new".to_vec())),
        ]
    );
    assert!(ca.is_untouched() && cb.is_untouched());

    // A read-only commit takes no number and captures nothing.
    assert_eq!(read(&mut ca, &guard, &a, 1).unwrap(), 10);
    let (seq, ok, captured) = unsafe { commit_capturing(&mut [&mut ca], &guard, &sequencer) };
    assert_eq!((seq, ok, captured.len()), (None, true, 0));

    // Deletes: of an existing key, and of a key inserted in this very
    // transaction (a placeholder it linked), both reported as deletions.
    unsafe {
        assert!(ca.delete(&guard, &a, &key(1)).unwrap());
        ca.insert(&guard, &a, &key(9), b"gone").unwrap();
        assert!(ca.delete(&guard, &a, &key(9)).unwrap());
        ca.update(&guard, &a, &key(2), b"upd").unwrap();
    }
    let (seq, ok, mut captured) = unsafe { commit_capturing(&mut [&mut ca], &guard, &sequencer) };
    assert_eq!((seq, ok), (Some(2), true));
    captured.sort();
    assert_eq!(
        captured,
        vec![
            ("a".into(), key(1).to_vec(), None),
            ("a".into(), key(2).to_vec(), Some(b"upd".to_vec())),
            ("a".into(), key(9).to_vec(), None),
        ]
    );
    assert_eq!(
        unsafe { ca.get_with(&guard, &a, &key(1), |_| ()) }.unwrap(),
        None
    );
    assert_eq!(
        unsafe { ca.get_with(&guard, &a, &key(9), |_| ()) }.unwrap(),
        None
    );
    unsafe { ca.abort(&guard) };

    // A writer that fails validation keeps the number it took.
    unsafe { ca.get_with(&guard, &b, &key(3), |_| ()).unwrap() };
    write(&mut ca, &guard, &a, 5, 1).unwrap();
    let mut other = TxContext::new(&engine);
    unsafe { other.put(&guard, &b, &key(3), b"other").unwrap() };
    let (seq, ok, _) = unsafe { commit_capturing(&mut [&mut other], &guard, &sequencer) };
    assert_eq!((seq, ok), (Some(3), true));
    let (seq, ok, captured) = unsafe { commit_capturing(&mut [&mut ca], &guard, &sequencer) };
    assert_eq!((seq, ok, captured.len()), (Some(4), false, 0));
    assert_eq!(sequencer.load(Ordering::SeqCst), 4);
}

/// Under concurrency, with conflicts: every commit with writes that locked
/// takes one number, committed or aborted, and the numbers taken are
/// exactly 1..=n, each once.
#[test]
fn sequence_numbers_are_dense_and_unique_across_threads() {
    const KEYS: u64 = 4;
    let engine = Engine::default();
    let rel = engine.create_relation("r").unwrap();
    let sequencer = AtomicU64::new(0);
    let taken: Vec<(Vec<u64>, u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let (engine, rel, sequencer) = (&engine, &rel, &sequencer);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    let mut ctx = TxContext::new(engine);
                    let (mut numbers, mut committed, mut aborted) = (Vec::new(), 0, 0);
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_millis(600) {
                        let guard = Guard::new();
                        let (r, w) = (rng.random_range(0..KEYS), rng.random_range(0..KEYS));
                        let read_only = rng.random_ratio(1, 5);
                        let body = (|| -> Result<(), TxError> {
                            let x = read(&mut ctx, &guard, rel, r)?;
                            if !read_only {
                                write(&mut ctx, &guard, rel, w, x + 1)?;
                            }
                            Ok(())
                        })();
                        if body.is_err() {
                            unsafe { ctx.abort(&guard) };
                            continue;
                        }
                        let (seq, ok, captured) =
                            unsafe { commit_capturing(&mut [&mut ctx], &guard, sequencer) };
                        if read_only {
                            assert_eq!(seq, None);
                            continue;
                        }
                        let Some(seq) = seq else {
                            assert!(!ok, "a writer that committed took a number");
                            continue;
                        };
                        numbers.push(seq);
                        if ok {
                            assert_eq!(captured.len(), 1);
                            committed += 1;
                        } else {
                            aborted += 1;
                        }
                    }
                    (numbers, committed, aborted)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = taken
        .iter()
        .flat_map(|(n, _, _)| n.iter().copied())
        .collect();
    let committed: u64 = taken.iter().map(|t| t.1).sum();
    let aborted: u64 = taken.iter().map(|t| t.2).sum();
    for (numbers, _, _) in &taken {
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "one thread's numbers grow"
        );
    }
    all.sort_unstable();
    let n = all.len() as u64;
    assert_eq!(all, (1..=n).collect::<Vec<_>>(), "dense from 1, each once");
    assert_eq!(sequencer.load(Ordering::SeqCst), n);
    assert_eq!(committed + aborted, n);
    assert!(committed > 100, "commits: {committed}");
    assert!(
        aborted > 0,
        "no writer failed validation after taking a number"
    );
}

/// The kind of a commit's conflict (where it was found aside).
fn conflict_kind(e: roost_storage::CommitError) -> roost_storage::ConflictKind {
    let roost_storage::CommitError::Conflict(c) = e;
    c.kind
}

//! Crash consistency (redb's habit): write a history, then damage copies of
//! its directory the ways a crash or a bad disk would, and check that
//! recovery gives back exactly a prefix of the history or an error naming
//! the file, and never panics.

mod common;

use std::fs::{self, OpenOptions};
use std::path::Path;
use std::sync::Arc;

use common::{checkpoints, frame_boundaries, segment_first_lsn, segments, TestDir};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_durability::{DurabilityConfig, Log, Recovered, SyncPolicy};

const RECORDS: u64 = 160;

fn config(dir: &Path) -> DurabilityConfig {
    let mut c = DurabilityConfig::new(dir);
    c.sync = SyncPolicy::Always;
    c.segment_bytes = 1500;
    c.checkpoint_after_bytes = u64::MAX;
    c
}

/// Writes the history and returns the model state after every prefix:
/// small segments and a checkpoint after records 70 and 120, then a
/// reopen at 130 with large segments, so that the last segment holds the
/// last 30 frames. A sync after every record.
fn history(dir: &TestDir, rng: &mut SmallRng) -> Vec<Recovered> {
    let (mut log, _) = Log::open(config(&dir.path)).expect("open");
    let mut model = Recovered::default();
    let mut models = vec![model.clone()];
    for i in 1..=RECORDS {
        let r = common::random_record(rng, &model, 48);
        assert_eq!(log.append(&r).expect("append"), i);
        log.commit().expect("commit");
        assert_eq!(log.durable_lsn(), i);
        model.apply(&r);
        models.push(model.clone());
        if i == 70 || i == 120 {
            log.checkpoint().expect("checkpoint");
        }
        if i == 130 {
            log.close().expect("close");
            drop(log);
            let mut c = config(&dir.path);
            c.segment_bytes = 1 << 20;
            let (reopened, rec) = Log::open(c).expect("reopen");
            assert_eq!(rec.reactors, model.reactors);
            assert_eq!(rec.last_lsn, 130);
            log = reopened;
        }
    }
    log.close().expect("close");
    models
}

/// Opens a damaged copy; `Ok` holds the recovered state.
fn recover(dir: &TestDir) -> Result<Recovered, String> {
    match Log::open(config(&dir.path)) {
        Ok((log, rec)) => {
            drop::<Arc<Log>>(log);
            Ok(rec)
        }
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn cuts_of_the_last_segment_recover_exactly_the_prefix() {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let base = TestDir::new("crash-cut-base");
    let models = history(&base, &mut rng);
    assert_eq!(checkpoints(&base.path).len(), 1);
    let segs = segments(&base.path);
    assert!(
        segs.len() >= 2,
        "several segments after the checkpoint: {segs:?}"
    );
    let last = segs.last().expect("a last segment").clone();
    let first = segment_first_lsn(&last);
    let len = fs::metadata(&last).expect("stat").len();
    let bounds = frame_boundaries(&last);
    assert_eq!(*bounds.last().expect("bounds"), len);
    assert_eq!(first + bounds.len() as u64 - 2, RECORDS);
    assert!(
        bounds.len() > 30,
        "the last segment holds the last 30 frames"
    );

    // Every frame boundary (a clean crash between frames), then random
    // offsets (torn writes), then a few inside the file header.
    let mut cuts: Vec<u64> = bounds.clone();
    cuts.extend((0..300).map(|_| rng.random_range(0..len)));
    cuts.extend([0, 1, 10, 21]);
    let mut torn = 0;
    for &cut in &cuts {
        let copy = base.copy("crash-cut");
        let path = copy.path.join(last.file_name().expect("name"));
        OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(cut))
            .expect("cut");
        // The records whose frames lie wholly before the cut.
        let whole = bounds.iter().filter(|&&b| b <= cut).count() as u64;
        let expected = first - 1 + whole.saturating_sub(1);
        let rec =
            recover(&copy).unwrap_or_else(|e| panic!("a cut at byte {cut} must recover: {e}"));
        assert_eq!(rec.last_lsn, expected, "cut at byte {cut}");
        assert_eq!(
            rec.reactors, models[expected as usize].reactors,
            "cut at byte {cut}"
        );
        let on_boundary = bounds.contains(&cut);
        assert_eq!(
            rec.truncated_tail.is_some(),
            !on_boundary,
            "cut at byte {cut}"
        );
        if !on_boundary {
            torn += 1;
        }
        // And the log goes on from there, durably.
        let (log, _) = Log::open(config(&copy.path)).expect("reopen");
        let lsn = log
            .append(&roost_durability::Record::Drop {
                reactor: b"alpha".to_vec(),
            })
            .expect("append after recovery");
        assert_eq!(lsn, expected + 1);
    }
    println!(
        "{} cuts ({} boundaries, {torn} torn) all recovered their prefix",
        cuts.len(),
        bounds.len()
    );
    assert!(torn > 0);
}

#[test]
fn bit_flips_give_a_prefix_or_an_error_naming_the_file() {
    let mut rng = SmallRng::seed_from_u64(0xb17f11b);
    let base = TestDir::new("crash-flip-base");
    let models = history(&base, &mut rng);
    let mut files = segments(&base.path);
    files.extend(checkpoints(&base.path));
    let last = segments(&base.path).pop().expect("a last segment");
    let last_bounds = frame_boundaries(&last);
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| fs::metadata(f).expect("stat").len())
        .collect();
    let total: u64 = sizes.iter().sum();

    let (mut prefixes, mut errors) = (0u32, 0u32);
    let flips = 1000;
    for i in 0..flips {
        // Three in four anywhere in the files; the rest in the last frame,
        // where a flip looks like a torn write.
        let (file, byte) = if i % 4 != 3 {
            let mut at = rng.random_range(0..total);
            let mut k = 0;
            while at >= sizes[k] {
                at -= sizes[k];
                k += 1;
            }
            (files[k].clone(), at)
        } else {
            let n = last_bounds.len();
            (
                last.clone(),
                rng.random_range(last_bounds[n - 2]..last_bounds[n - 1]),
            )
        };
        let bit = rng.random_range(0..8u32);
        let copy = base.copy("crash-flip");
        let name = file
            .file_name()
            .expect("name")
            .to_str()
            .expect("utf-8")
            .to_string();
        let path = copy.path.join(&name);
        let mut data = fs::read(&path).expect("read");
        data[byte as usize] ^= 1 << bit;
        fs::write(&path, &data).expect("write");
        match recover(&copy) {
            Ok(rec) => {
                // One flipped bit can cost the last frame (it looks torn),
                // never more.
                assert!(
                    rec.last_lsn == RECORDS || rec.last_lsn == RECORDS - 1,
                    "a flip of bit {bit} of byte {byte} of {name} lost records: last lsn {}",
                    rec.last_lsn
                );
                assert_eq!(
                    rec.reactors, models[rec.last_lsn as usize].reactors,
                    "a flip of bit {bit} of byte {byte} of {name} gave a state that is no prefix"
                );
                prefixes += 1;
            }
            Err(msg) => {
                assert!(msg.contains(&name), "the error must name {name}: {msg}");
                errors += 1;
            }
        }
    }
    println!(
        "{flips} bit flips: {prefixes} recovered a prefix, {errors} refused with the file named"
    );
    assert!(prefixes > 0, "some flips look like a torn tail");
    assert!(errors > 0, "most flips are corruption");
}

/// A crash at each point of a checkpoint leaves a directory that recovers
/// the whole history.
#[test]
fn a_crash_during_a_checkpoint_is_recoverable() {
    let mut rng = SmallRng::seed_from_u64(7);
    let dir = TestDir::new("crash-ckpt");
    let (log, _) = Log::open(config(&dir.path)).expect("open");
    let mut model = Recovered::default();
    for _ in 0..100 {
        let r = common::random_record(&mut rng, &model, 48);
        log.append(&r).expect("append");
        model.apply(&r);
    }
    log.checkpoint().expect("first checkpoint");
    for _ in 0..60 {
        let r = common::random_record(&mut rng, &model, 48);
        log.append(&r).expect("append");
        model.apply(&r);
    }
    log.sync().expect("sync");
    // Before the second checkpoint: old checkpoint and every segment.
    let before = dir.copy("crash-ckpt-before");
    let report = log.checkpoint().expect("second checkpoint");
    assert_eq!(report.covered_lsn, 160);
    let after = dir.copy("crash-ckpt-after");
    drop(log);

    let check = |d: &TestDir, what: &str| {
        let rec = recover(d).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(rec.last_lsn, 160, "{what}");
        assert_eq!(rec.reactors, model.reactors, "{what}");
        rec
    };
    // 1. Crashed while writing the new checkpoint: a partial .tmp.
    let d = before.copy("crash-ckpt-1");
    let new_ckpt = checkpoints(&after.path).pop().expect("new checkpoint");
    let name = new_ckpt.file_name().expect("name").to_str().expect("utf-8");
    let bytes = fs::read(&new_ckpt).expect("read");
    fs::write(
        d.path.join(format!("{name}.tmp")),
        &bytes[..bytes.len() / 2],
    )
    .expect("write");
    check(&d, "partial tmp checkpoint");
    // 2. Renamed, nothing deleted yet: both checkpoints and all segments.
    let d = before.copy("crash-ckpt-2");
    fs::copy(&new_ckpt, d.path.join(name)).expect("copy");
    let rec = check(&d, "both checkpoints");
    assert_eq!(rec.checkpoint_lsn, Some(160));
    assert_eq!(rec.records_replayed, 0);
    let (_, older) = Log::open(config(&d.path)).expect("reopen");
    assert_eq!(older.checkpoint_lsn, Some(160));
    assert_eq!(
        checkpoints(&d.path).len(),
        1,
        "the older checkpoint was removed"
    );
    // 3. Some of the folded segments deleted (oldest first), not all.
    let d = before.copy("crash-ckpt-3");
    fs::copy(&new_ckpt, d.path.join(name)).expect("copy");
    let old_ckpt = checkpoints(&before.path).pop().expect("old checkpoint");
    fs::remove_file(d.path.join(old_ckpt.file_name().expect("name"))).expect("remove");
    let segs = segments(&d.path);
    fs::remove_file(&segs[0]).expect("remove");
    check(&d, "some folded segments left");
    // 4. All done.
    check(&after, "after the checkpoint");
}

/// A cut inside a segment that is not the last is corruption, not a torn
/// tail: records after it exist.
#[test]
fn a_cut_in_an_earlier_segment_is_an_error_naming_it() {
    let mut rng = SmallRng::seed_from_u64(11);
    let base = TestDir::new("crash-early-base");
    history(&base, &mut rng);
    let segs = segments(&base.path);
    assert!(segs.len() >= 2);
    for victim in &segs[..segs.len() - 1] {
        let bounds = frame_boundaries(victim);
        let len = fs::metadata(victim).expect("stat").len();
        for cut in [bounds[bounds.len() - 2], len - 1, len / 2, 5] {
            let copy = base.copy("crash-early");
            let name = victim
                .file_name()
                .expect("name")
                .to_str()
                .expect("utf-8")
                .to_string();
            OpenOptions::new()
                .write(true)
                .open(copy.path.join(&name))
                .and_then(|f| f.set_len(cut))
                .expect("cut");
            let msg = recover(&copy).expect_err("an earlier segment cut short");
            assert!(msg.contains(&name), "{msg}");
        }
    }
}

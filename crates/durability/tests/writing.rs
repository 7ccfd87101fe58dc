//! Group commit, a failed log, the planted bug, sync policies, concurrent
//! checkpoints, counters.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TestDir;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use roost_durability::format::MAX_PAYLOAD_BYTES;
use roost_durability::{
    AppendError, DurabilityBugs, DurabilityConfig, FaultInjector, Log, Record, Recovered, RowDelta,
    SyncError, SyncPolicy,
};

fn delta(reactor: &[u8], t_version: u64, key: &[u8]) -> Record {
    Record::Delta {
        reactor: reactor.to_vec(),
        t_version,
        rows: vec![RowDelta {
            relation: "t".into(),
            key: key.to_vec(),
            value: Some(t_version.to_le_bytes().to_vec()),
        }],
    }
}

#[test]
fn log_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Log>();
    check::<Arc<Log>>();
}

// ---------------------------------------------------------------- 4. group commit

#[test]
fn group_commit_shares_fdatasyncs_and_loses_nothing() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 500;
    let dir = TestDir::new("group");
    let c = DurabilityConfig::new(&dir.path);
    assert_eq!(c.sync, SyncPolicy::Always);
    let (log, _) = Log::open(c.clone()).expect("open");
    let started = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let reactor = format!("thread-{t}").into_bytes();
                for i in 1..=PER_THREAD {
                    let lsn = log
                        .append(&delta(&reactor, i, &i.to_be_bytes()))
                        .expect("append");
                    log.commit().expect("commit");
                    // Durable before commit returns.
                    assert!(log.durable_lsn() >= lsn);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    let stats = log.stats();
    println!(
        "group commit: {} records appended, {} fdatasyncs, {:?}",
        stats.records_appended,
        stats.syncs,
        started.elapsed()
    );
    assert_eq!(stats.records_appended, THREADS * PER_THREAD);
    assert!(
        stats.syncs < stats.records_appended,
        "{} syncs for {} appends: no sharing",
        stats.syncs,
        stats.records_appended
    );
    assert_eq!(stats.durable_lsn, THREADS * PER_THREAD);
    drop(log);
    let (_log, rec) = Log::open(c).expect("reopen");
    assert_eq!(rec.last_lsn, THREADS * PER_THREAD);
    for t in 0..THREADS {
        let copy = &rec.reactors[format!("thread-{t}").as_bytes()];
        assert_eq!(copy.rows.len() as u64, PER_THREAD, "thread {t}");
        assert_eq!(copy.t_version, PER_THREAD);
        assert!(!copy.contiguous, "built from deltas only");
    }
}

// ---------------------------------------------------------------- 6. failed log

/// Makes the log's directory unwritable. Returns false when that does not
/// stop writes (running as root), after restoring it.
fn make_read_only(dir: &std::path::Path) -> bool {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).expect("chmod");
    let probe = dir.join("probe");
    if fs::write(&probe, b"x").is_ok() {
        let _ = fs::remove_file(&probe);
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).expect("chmod back");
        return false;
    }
    true
}

#[test]
fn a_failed_log_refuses_writes_naming_the_directory() {
    let dir = TestDir::new("failed");
    let faults = FaultInjector::new();
    let mut c = DurabilityConfig::new(&dir.path);
    c.segment_bytes = 64; // every append after the first rolls to a new file
    c.faults = faults.clone();
    let (log, _) = Log::open(c.clone()).expect("open");
    let mut model = Recovered::default();
    for i in 1..=3 {
        let r = delta(b"r", i, b"k");
        log.append(&r).expect("append");
        log.commit().expect("commit");
        model.apply(&r);
    }
    let read_only = make_read_only(&dir.path);
    if !read_only {
        println!("running as root: the read-only directory stays writable; injecting a full disk");
        faults.fail_writes(true);
    }
    // The next write to the segment (by the append that needs a new
    // segment, or by the commit that writes what waits) fails, naming the
    // directory.
    let want = dir.path.clone();
    let dir_name = dir.path.to_str().expect("utf-8");
    let mut first_err = None;
    for i in 4..10 {
        let failed = match log.append(&delta(b"r", i, b"k")) {
            Ok(_) => match log.commit() {
                Ok(()) => {
                    model.apply(&delta(b"r", i, b"k"));
                    None
                }
                Err(e) => {
                    assert!(
                        matches!(&e, SyncError::Failed { dir: d, .. } if *d == want),
                        "{e}"
                    );
                    Some(e.to_string())
                }
            },
            Err(e) => {
                assert!(
                    matches!(&e, AppendError::Failed { dir: d, .. } if *d == want),
                    "{e}"
                );
                Some(e.to_string())
            }
        };
        if failed.is_some() {
            first_err = failed;
            break;
        }
    }
    let msg = first_err.expect("a write to a read-only directory or a full disk fails");
    println!("{msg}");
    assert!(msg.contains(dir_name), "{msg}");
    // Sticky: even once the disk has room again.
    faults.fail_writes(false);
    if read_only {
        fs::set_permissions(&dir.path, fs::Permissions::from_mode(0o755)).expect("chmod back");
    }
    for i in 0..3 {
        let e = log
            .append(&delta(b"r", 100 + i, b"k"))
            .expect_err("still failed");
        assert!(matches!(e, AppendError::Failed { .. }), "{e}");
        assert!(e.to_string().contains(dir_name));
    }
    assert!(matches!(log.commit(), Err(SyncError::Failed { .. })));
    assert!(matches!(log.sync(), Err(SyncError::Failed { .. })));
    assert!(log.checkpoint().is_err());
    let stats = log.stats();
    assert!(stats.failed && stats.failures >= 1);
    assert!(!log
        .prometheus()
        .contains("roost_durability_failures_total 0"));
    assert!(log.close().is_err());
    drop(log);
    // What was committed before the failure is all there.
    let (_log, rec) = Log::open(c).expect("reopen");
    assert_eq!(rec.reactors, model.reactors);
}

// ---------------------------------------------------------------- 7. planted bug

#[test]
fn planted_answer_before_fsync_is_observable() {
    // Without the bug, commit syncs.
    let dir = TestDir::new("bug-off");
    let (log, _) = Log::open(DurabilityConfig::new(&dir.path)).expect("open");
    let before = log.stats().syncs;
    log.append(&delta(b"r", 1, b"k")).expect("append");
    log.commit().expect("commit");
    assert_eq!(log.stats().syncs, before + 1);
    assert_eq!(log.durable_lsn(), log.appended_lsn());

    // With it, commit answers with the record not yet durable.
    let dir = TestDir::new("bug-on");
    let mut c = DurabilityConfig::new(&dir.path);
    c.bugs = DurabilityBugs {
        answer_before_fsync: true,
    };
    let (log, _) = Log::open(c).expect("open");
    let before = log.stats().syncs;
    for i in 1..=5 {
        log.append(&delta(b"r", i, b"k")).expect("append");
        log.commit().expect("commit");
    }
    assert_eq!(
        log.stats().syncs,
        before,
        "the planted bug skipped the fdatasync"
    );
    assert_eq!(log.appended_lsn(), 5);
    assert_eq!(log.durable_lsn(), 0, "committed but not durable");
}

// ---------------------------------------------------------------- 8. policy parsing

#[test]
fn sync_policy_parses_good_strings_and_refuses_bad_ones() {
    let good = [
        ("always", SyncPolicy::Always),
        ("  Always ", SyncPolicy::Always),
        ("off", SyncPolicy::Off),
        ("every 1000", SyncPolicy::EveryMs(1000)),
        ("every:5", SyncPolicy::EveryMs(5)),
        ("every=60000", SyncPolicy::EveryMs(60000)),
        ("every 1", SyncPolicy::EveryMs(1)),
    ];
    for (s, p) in good {
        assert_eq!(s.parse::<SyncPolicy>().expect(s), p, "{s}");
        // Display round-trips.
        assert_eq!(p.to_string().parse::<SyncPolicy>().expect("display"), p);
    }
    assert_eq!(SyncPolicy::EveryMs(1000).to_string(), "every 1000");
    assert_eq!(SyncPolicy::default(), SyncPolicy::Always);
    for bad in [
        "",
        "sometimes",
        "every",
        "every 0",
        "every 60001",
        "every -5",
        "every 1.5",
        "every1000",
        "every 99999999999999999999999",
        "every 10ms",
        "always!",
    ] {
        let e = bad.parse::<SyncPolicy>().expect_err(bad);
        let msg = e.to_string();
        assert!(
            msg.contains("\"always\"") && msg.contains("\"off\"") && msg.contains("every <ms>"),
            "{bad:?}: {msg}"
        );
        assert_eq!(e.input, bad);
    }
    println!("{}", "every 0".parse::<SyncPolicy>().expect_err("bad"));
}

// ---------------------------------------------------------------- more

/// Checkpoints run while writers append; the result is the fold of the
/// records in lsn order.
#[test]
fn checkpoints_do_not_stop_the_writers() {
    let dir = TestDir::new("concurrent");
    let mut c = DurabilityConfig::new(&dir.path);
    c.sync = SyncPolicy::Off;
    c.segment_bytes = 4096;
    c.checkpoint_after_bytes = u64::MAX;
    let (log, _) = Log::open(c.clone()).expect("open");
    let appended: Arc<Mutex<Vec<(u64, Record)>>> = Arc::default();
    let writers: Vec<_> = (0..2u8)
        .map(|t| {
            let log = Arc::clone(&log);
            let appended = Arc::clone(&appended);
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(u64::from(t));
                let mut local = Recovered::default();
                for _ in 0..1500 {
                    let r = common::random_record(&mut rng, &local, 40);
                    local.apply(&r);
                    let lsn = log.append(&r).expect("append");
                    appended.lock().expect("lock").push((lsn, r));
                }
            })
        })
        .collect();
    let mut reports = Vec::new();
    // Bounded: the writers finish.
    while !writers.iter().all(|w| w.is_finished()) {
        reports.push(log.checkpoint().expect("checkpoint"));
        std::thread::sleep(Duration::from_millis(2));
    }
    for w in writers {
        w.join().expect("writer");
    }
    reports.push(log.checkpoint().expect("checkpoint"));
    assert!(reports
        .windows(2)
        .all(|w| w[0].covered_lsn <= w[1].covered_lsn));
    assert_eq!(reports.last().map(|r| r.covered_lsn), Some(3000));
    println!("{} checkpoints during 3000 appends", reports.len());
    drop(log);
    let mut records = std::mem::take(&mut *appended.lock().expect("lock"));
    records.sort_by_key(|(lsn, _)| *lsn);
    let mut model = Recovered::default();
    for (i, (lsn, r)) in records.iter().enumerate() {
        assert_eq!(*lsn, i as u64 + 1, "lsns are consecutive");
        model.apply(r);
    }
    let (_log, rec) = Log::open(c).expect("reopen");
    assert_eq!(rec.last_lsn, 3000);
    assert_eq!(rec.reactors, model.reactors);
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn background_checkpoint_and_interval_sync() {
    let dir = TestDir::new("background");
    let mut c = DurabilityConfig::new(&dir.path);
    c.sync = SyncPolicy::EveryMs(5);
    c.segment_bytes = 1024;
    c.checkpoint_after_bytes = 8 * 1024;
    let (log, _) = Log::open(c.clone()).expect("open");
    let mut model = Recovered::default();
    for i in 1..=400u64 {
        let r = delta(b"r", i, &(i % 50).to_be_bytes());
        log.append(&r).expect("append");
        log.commit().expect("commit does not wait");
        model.apply(&r);
    }
    wait_for("the interval sync", || log.durable_lsn() == 400);
    wait_for("a background checkpoint", || log.stats().checkpoints > 0);
    let stats = log.stats();
    assert!(stats.checkpoint_lsn > 0);
    println!("{stats:?}");
    drop(log);
    let (_log, rec) = Log::open(c).expect("reopen");
    assert_eq!(rec.reactors, model.reactors);
    assert!(rec.checkpoint_lsn.is_some());
}

#[test]
fn off_policy_never_syncs_on_commit_but_close_does() {
    let dir = TestDir::new("off");
    let mut c = DurabilityConfig::new(&dir.path);
    c.sync = SyncPolicy::Off;
    let (log, _) = Log::open(c).expect("open");
    log.append(&delta(b"r", 1, b"k")).expect("append");
    log.commit().expect("commit");
    assert_eq!(log.stats().syncs, 0);
    assert_eq!(log.durable_lsn(), 0);
    log.close().expect("close");
    assert_eq!(log.durable_lsn(), 1);
    assert_eq!(log.stats().syncs, 1);
    let e = log.append(&delta(b"r", 2, b"k")).expect_err("closed");
    assert!(matches!(e, AppendError::Closed { .. }), "{e}");
}

#[test]
fn too_large_records_are_refused_and_the_log_goes_on() {
    let dir = TestDir::new("large");
    let (log, _) = Log::open(DurabilityConfig::new(&dir.path)).expect("open");
    let huge = Record::Image {
        reactor: b"r".to_vec(),
        t_version: 1,
        rows: vec![roost_durability::RowImage {
            relation: "t".into(),
            key: vec![],
            value: vec![0u8; MAX_PAYLOAD_BYTES as usize + 1],
        }],
    };
    let e = log.append(&huge).expect_err("too large");
    assert!(
        matches!(e, AppendError::TooLarge { max_bytes, .. } if max_bytes == MAX_PAYLOAD_BYTES),
        "{e}"
    );
    assert_eq!(log.append(&delta(b"r", 1, b"k")).expect("append"), 1);
    assert!(!log.stats().failed);
}

#[test]
fn counters_in_prometheus_text() {
    let dir = TestDir::new("metrics");
    let (log, _) = Log::open(DurabilityConfig::new(&dir.path)).expect("open");
    log.append_all(&[delta(b"r", 1, b"a"), delta(b"r", 2, b"b")])
        .expect("append_all");
    log.commit().expect("commit");
    log.checkpoint().expect("checkpoint");
    let text = log.prometheus();
    println!("{text}");
    for line in [
        "# TYPE roost_durability_records_appended_total counter",
        "roost_durability_records_appended_total 2",
        "# HELP roost_durability_syncs_total ",
        "roost_durability_checkpoints_total 1",
        "# TYPE roost_durability_segments gauge",
        "roost_durability_durable_lsn 2",
        "roost_durability_checkpoint_lsn 2",
        "roost_durability_failures_total 0",
    ] {
        assert!(text.contains(line), "missing {line:?}");
    }
    for name in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(name.starts_with("roost_durability_"), "{name}");
    }
    let s = log.stats();
    assert_eq!((s.records_appended, s.checkpoints, s.failures), (2, 1, 0));
    assert!(s.bytes_appended > 0);
}

#[test]
fn invalid_config_is_refused() {
    let dir = TestDir::new("config");
    let mut c = DurabilityConfig::new(&dir.path);
    c.sync = SyncPolicy::EveryMs(0);
    let e = Log::open(c).err().expect("refused");
    assert!(e.to_string().contains("1 to 60000"), "{e}");
    let mut c = DurabilityConfig::new(&dir.path);
    c.segment_bytes = 0;
    assert!(Log::open(c).is_err());
}

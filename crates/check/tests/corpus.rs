//! The checker's self-test: hand-written histories under `tests/corpus/`,
//! each starting with `# expect: valid` or `# expect: <anomaly> ...` (the
//! exact set of classes the checker must report), at least one per anomaly
//! class the checker claims.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use roost_check::{check, AnomalyKind, History};

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files
}

/// The `# expect:` line: class names, or nothing for `valid`.
fn expected(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).expect("readable fixture");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("# expect:"))
        .unwrap_or_else(|| panic!("{} has no `# expect:` line", path.display()));
    line.split_whitespace()
        .filter(|w| *w != "valid")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_fixture_gets_its_expected_verdict() {
    let files = corpus();
    assert!(files.len() >= 20, "corpus too small: {}", files.len());
    let mut failures = Vec::new();
    for path in &files {
        let history = History::load_from_path(path).expect("fixture loads");
        let report = check(&history).expect("fixture checks");
        let found: BTreeSet<String> = report
            .kinds()
            .iter()
            .map(|k| k.name().to_string())
            .collect();
        let want = expected(path);
        if found != want {
            failures.push(format!(
                "{}: expected {want:?}, got:\n{report}",
                path.display()
            ));
        }
        // Every anomaly carries an explanation naming a transaction.
        for a in &report.anomalies {
            assert!(a.explanation.contains('T'), "{}: {a:?}", path.display());
            assert!(!a.ops.is_empty());
        }
        if want.is_empty() {
            assert!(report.valid());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_corpus_covers_every_claimed_class() {
    let mut covered = BTreeSet::new();
    let mut valid = 0;
    for path in corpus() {
        let want = expected(&path);
        valid += usize::from(want.is_empty());
        covered.extend(want);
    }
    use AnomalyKind::*;
    // Every class except the three real-time cycle variants the corpus does
    // not need separately (G-single-realtime, G0-realtime and G1c-realtime
    // are covered; G2-realtime is the fallback class).
    let claimed = [
        G0,
        G1a,
        G1b,
        G1c,
        GSingle,
        G2,
        G0Realtime,
        G1cRealtime,
        GSingleRealtime,
        LostWrite,
        NeverWritten,
        DuplicateElements,
        IncompatibleOrder,
        Internal,
        BankTotal,
        BankNegative,
        CounterOutOfRange,
        CounterBeyondBound,
        ScanShape,
        ScanCount,
        MissedRow,
    ];
    for kind in claimed {
        assert!(covered.contains(kind.name()), "no fixture for {kind}");
    }
    assert!(valid >= 4, "only {valid} valid fixtures");
}

#[test]
fn cycle_explanations_name_edges_keys_and_values() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/la_g_single.jsonl");
    let report = check(&History::load_from_path(&path).unwrap()).unwrap();
    let text = report.to_string();
    println!("{text}");
    assert!(text.contains("G-single"), "{text}");
    assert!(text.contains("-rw->") && text.contains("-wr->"), "{text}");
    assert!(text.contains("key 1") && text.contains("key 2"), "{text}");
    assert!(
        text.contains("T1 (process 1") && text.contains("T2 (process 2"),
        "{text}"
    );
}

//! Replays, through the same checks the fuzz targets run, every committed
//! seed (`fuzz/corpus/<target>/`) and every input a fuzzer found
//! (`fuzz/regressions/<target>/`, one file per finding, kept after the fix),
//! without libFuzzer: so an ordinary `cargo test` fails again if a fixed
//! bug comes back.

use std::path::{Path, PathBuf};

use roost_fuzz::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir` (none if it does not exist), sorted.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `check` on every file; the files whose check panicked.
fn replay(check: fn(&[u8]), files: &[PathBuf]) -> Vec<String> {
    let mut failed = Vec::new();
    for file in files {
        let data = std::fs::read(file).expect("a readable input");
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            failed.push(file.display().to_string());
        }
    }
    failed
}

/// Every folder under corpus/ and regressions/ is a known target's, so no
/// input is silently left out by a misspelt name.
#[test]
fn every_input_folder_names_a_target() {
    for kind in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(kind)) else {
            continue;
        };
        for entry in entries {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                TARGETS.iter().any(|t| t.name == name),
                "fuzz/{kind}/{name} is not a fuzz target"
            );
        }
    }
}

#[test]
fn every_target_has_seeds_and_they_pass() {
    let mut failed = Vec::new();
    for target in TARGETS {
        let files = inputs(&fuzz_dir().join("corpus").join(target.name));
        assert!(!files.is_empty(), "no seed corpus for {}", target.name);
        failed.extend(replay(target.check, &files));
    }
    assert!(failed.is_empty(), "seeds that fail: {failed:?}");
}

#[test]
fn every_regression_input_passes() {
    let mut failed = Vec::new();
    let mut replayed = 0;
    for target in TARGETS {
        let files = inputs(&fuzz_dir().join("regressions").join(target.name));
        replayed += files.len();
        failed.extend(replay(target.check, &files));
    }
    eprintln!("replayed {replayed} regression inputs");
    assert!(failed.is_empty(), "regression inputs that fail: {failed:?}");
}

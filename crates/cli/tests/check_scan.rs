//! `roost check scan`: the scan workload over several seeds, one verdict per
//! seed and a summary; exit 0 when every history is valid, non-zero when a
//! planted bug (phantom validation skipped) makes one invalid. CI runs this
//! bounded slice; the full campaign is `roost check scan --seeds 100
//! --seconds 10` (and the same with `--reactors`).

use std::process::Command;

/// Runs `roost check scan --quick --seeds 2` with `extra` flags; returns
/// whether it exited 0 and what it printed.
fn check_scan(name: &str, extra: &[&str]) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("roost-check-scan-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_roost"))
        .args(["check", "scan", "--quick", "--seeds", "2", "--clients", "3"])
        .arg("--out")
        .arg(dir.join("history.jsonl"))
        .args(extra)
        .output()
        .expect("run roost check");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let histories = ["history-seed1.jsonl", "history-seed2.jsonl"]
        .iter()
        .filter(|f| dir.join(f).is_file())
        .count();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(histories, 2, "one history per seed: {text}");
    (output.status.success(), text)
}

#[test]
fn two_seeds_of_the_scan_workload_are_valid() {
    let (ok, text) = check_scan("valid", &[]);
    println!("{text}");
    assert!(ok, "{text}");
    assert!(
        text.contains("seed 1: VALID") && text.contains("seed 2: VALID"),
        "{text}"
    );
    assert!(
        text.contains("summary: 2 seeds") && text.contains("2 VALID, 0 INVALID"),
        "{text}"
    );
}

#[test]
fn skipped_phantom_validation_fails_the_campaign() {
    let (ok, text) = check_scan("planted", &["--skip-phantom-validation"]);
    println!("{text}");
    assert!(
        !ok,
        "a planted bug must make `roost check scan` exit non-zero: {text}"
    );
    assert!(
        text.contains("PLANTED BUG: phantom validation skipped"),
        "{text}"
    );
    assert!(
        text.contains("scan-count") && text.contains("missed (a phantom)"),
        "{text}"
    );
    assert!(text.contains("not strictly serializable"), "{text}");
}

//! `roost check rw-register --cluster 3`: clients against a real cluster of
//! `roost node` processes and a real etcd while the nemesis kills, pauses,
//! partitions, drops, delays, duplicates and cuts etcd off; the checker judges
//! the history. The real register is valid; a register with quorums one short
//! (planted) is caught. CI runs this bounded slice; the full campaign is
//! `roost check rw-register --cluster 3 --seconds 600 --seed N`.

use std::process::Command;

mod common;

use common::require_etcd;

fn check_cluster(name: &str, extra: &[&str]) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("roost-nemesis-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("history.jsonl");
    let output = Command::new(env!("CARGO_BIN_EXE_roost"))
        .args([
            "check",
            "rw-register",
            "--cluster",
            "3",
            "--register",
            "--seconds",
            "6",
        ])
        .args([
            "--fault-interval-ms",
            "600",
            "--nemesis",
            "all",
            "--seed",
            "3",
        ])
        .arg("--out")
        .arg(&out)
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run roost check");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let faults = std::fs::read_to_string(out.with_extension("faults.jsonl")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (
        output.status.success(),
        text + "\n--- faults ---\n" + &faults,
    )
}

#[test]
fn the_register_stays_linearizable_under_the_nemesis() {
    require_etcd();
    let (ok, text) = check_cluster("valid", &[]);
    assert!(ok, "{text}");
    assert!(text.contains("VALID"), "{text}");
    // The nemesis really struck: faults were logged with their times.
    let faults: Vec<&str> = text
        .split("--- faults ---")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"at_ns\""))
        .collect();
    assert!(faults.len() >= 4, "too few faults: {text}");
    assert!(faults.iter().all(|l| !l.contains("\"error\"")), "{text}");
}

#[test]
fn the_nemesis_and_checker_catch_quorums_one_short() {
    require_etcd();
    let (ok, text) = check_cluster("planted", &["--planted-quorum-minus-one"]);
    assert!(!ok, "a register with quorums one short passed: {text}");
    assert!(text.contains("not strictly serializable"), "{text}");
}

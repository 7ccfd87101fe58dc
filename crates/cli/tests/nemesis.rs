//! `roost check rw-register --cluster 3 --register`: clients against a real cluster of
//! `roost node` processes and a real etcd while the nemesis kills, pauses,
//! partitions, drops, delays, duplicates and cuts etcd off; the checker judges
//! the history. The real register is valid; a register with quorums one short
//! (planted) is caught. CI runs this bounded slice; the full campaign is
//! `roost check rw-register --cluster 3 --register --seconds 600 --seed N`.

#[path = "common/check_run.rs"]
mod check_run;
mod common;

use check_run::{roost_check, CheckRun};
use common::require_etcd;

/// One cluster at a time: a cluster's ports are picked free and released
/// before its nodes bind them, and another test's clients could take one
/// as their source port meanwhile (a node of the planted run once failed to
/// bind so, and the run never read).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn check_cluster(name: &str, extra: &[&str]) -> CheckRun {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut args = vec![
        "rw-register",
        "--cluster",
        "3",
        "--register",
        "--seconds",
        "6",
    ];
    args.extend([
        "--fault-interval-ms",
        "600",
        "--nemesis",
        "all",
        "--seed",
        "3",
    ]);
    args.extend(extra);
    roost_check(&format!("roost-nemesis-{name}"), &args)
}

#[test]
fn the_register_stays_linearizable_under_the_nemesis() {
    require_etcd();
    let run = check_cluster("valid", &[]);
    let text = format!("{}\n--- faults ---\n{}", run.text, run.faults.join("\n"));
    assert!(run.ok, "{text}");
    assert!(run.text.contains("VALID"), "{text}");
    // The nemesis really struck: faults were logged with their times.
    let faults = run.struck();
    assert!(faults.len() >= 4, "too few faults: {text}");
    assert!(faults.iter().all(|l| !l.contains("\"error\"")), "{text}");
}

#[test]
fn the_nemesis_and_checker_catch_quorums_one_short() {
    require_etcd();
    let run = check_cluster("planted", &["--planted-quorum-minus-one"]);
    let text = &run.text;
    assert!(!run.ok, "a register with quorums one short passed: {text}");
    assert!(text.contains("not strictly serializable"), "{text}");
}

//! `roost bench handover` end to end on a three-node cluster of `roost node`
//! processes: the three systems run, every session is read back and checked
//! after each, static sharding moves no reactor while Roost moves the
//! phones that hand over to another node; the session check catches a
//! planted lost write.

use std::path::Path;
use std::process::{Command, Output};

/// One cluster at a time: each picks free ports and releases them before
/// its nodes bind, so two starting at once could be handed the same ones.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn handover(out: &Path, extra: &[&str]) -> Output {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Command::new(env!("CARGO_BIN_EXE_roost"))
        .args(["bench", "handover", "--out"])
        .arg(out)
        .args(["--reps", "1", "--seconds", "1", "--clients-per-node", "4"])
        .args(["--phones", "200", "--stations", "10", "--moving", "0.5"])
        .args(["--handovers", "0.25"])
        .args(extra)
        .output()
        .expect("running roost bench handover")
}

#[test]
fn the_session_check_catches_a_lost_write() {
    let out = std::env::temp_dir().join(format!("roost-handover-planted-{}", std::process::id()));
    let output = handover(&out, &["--planted", "lose-finish-session"]);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !output.status.success(),
        "the lost writes went unnoticed: {log}"
    );
    assert!(
        log.contains("sessions are not what their clients last wrote"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_three_systems_run_checked_and_only_roost_moves_phones() {
    let out = std::env::temp_dir().join(format!("roost-handover-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let output = handover(&out, &[]);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{log}");
    assert_eq!(log.matches("sessions checked").count(), 3, "{log}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("handover.json")).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    let row = |system: &str| {
        rows.iter()
            .find(|r| r["system"] == system)
            .unwrap_or_else(|| panic!("no {system} row: {log}"))
    };
    for system in ["perfect", "static-2pc", "roost"] {
        assert!(
            row(system)["throughput_tps"].as_f64().unwrap() > 0.0,
            "{log}"
        );
    }
    assert_eq!(
        row("perfect")["extra"]["cross_node_percent"].as_f64(),
        Some(0.0)
    );
    assert!(
        row("static-2pc")["extra"]["cross_node_percent"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{log}"
    );
    assert_eq!(
        row("static-2pc")["extra"]["moves_median"].as_f64(),
        Some(0.0)
    );
    assert!(
        row("roost")["extra"]["moves_median"].as_f64().unwrap() > 0.0,
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_bad_window_is_refused_before_any_cluster_starts() {
    for seconds in ["-1", "0", "NaN", "1e9"] {
        let output = Command::new(env!("CARGO_BIN_EXE_roost"))
            .args([
                "bench",
                "handover",
                &format!("--seconds={seconds}"),
                "--out",
            ])
            .arg(std::env::temp_dir().join("roost-handover-never-written"))
            .output()
            .expect("running roost bench handover");
        let log = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "--seconds {seconds}: {log}");
        assert!(log.contains("--seconds"), "--seconds {seconds}: {log}");
        assert!(!log.contains("panicked"), "--seconds {seconds}: {log}");
    }
}

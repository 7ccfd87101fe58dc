//! `roost demo`, the README's main command: a short run on a fresh
//! scratch directory must start its cluster without etcd, show the killed
//! node in its progress lines, restart it, and end with the checked verdict;
//! the check must catch a planted lost write.

use std::process::{Command, Output};

/// One cluster at a time: each picks free ports and releases them before
/// its nodes bind, so two starting at once could be handed the same ones.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn demo(args: &[&str]) -> (Output, String) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let output = Command::new(env!("CARGO_BIN_EXE_roost"))
        .arg("demo")
        .args(args)
        // No etcd on the PATH: the demo needs none.
        .env("PATH", "/nonexistent")
        .output()
        .expect("roost demo runs");
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, log)
}

/// The count that opens the summary line.
fn committed(log: &str) -> u64 {
    log.lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .and_then(|l| l.split_whitespace().next())
        .map(|n| n.replace(',', ""))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary line in:\n{log}"))
}

#[test]
fn the_handover_demo_kills_a_node_and_checks_that_nothing_acknowledged_was_lost() {
    let (output, log) = demo(&["--seconds", "8"]);
    assert!(output.status.success(), "{log}");
    for needle in [
        "Handover",
        "nodes up 2/3",
        "nodes up 3/3",
        "SIGKILL node 1",
        "restart node 1",
        "phones' sessions read at each of the 3 nodes; lost acknowledged writes: 0",
        "Nothing acknowledged was lost.",
    ] {
        assert!(log.contains(needle), "no `{needle}` in:\n{log}");
    }
    assert!(!log.contains("failed:"), "a fault was not injected:\n{log}");
    let moves: u64 = log
        .lines()
        .find_map(|l| l.trim().strip_prefix("ownership: "))
        .and_then(|l| l.split_whitespace().next())
        .map(|n| n.replace(',', ""))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ownership line in:\n{log}"));
    assert!(moves > 0, "no session moved:\n{log}");
    assert!(committed(&log) > 1_000, "{log}");
}

#[test]
fn the_handover_demo_catches_a_lost_session_write() {
    let (output, log) = demo(&["--seconds", "4", "--planted", "lose-finish-session"]);
    assert!(
        !output.status.success(),
        "the lost writes went unnoticed:\n{log}"
    );
    assert!(log.contains("acknowledged writes were lost"), "{log}");
    assert!(
        log.contains("is not what their last acknowledged transaction wrote")
            || log.contains("are not what their last acknowledged transaction wrote"),
        "{log}"
    );
}

#[test]
fn the_bank_demo_kills_a_node_and_checks_the_history() {
    let (output, log) = demo(&["--bank", "--seconds", "8"]);
    assert!(output.status.success(), "{log}");
    for needle in [
        "nodes up 2/3",
        "nodes up 3/3",
        "Kill { node: 1 }",
        "Restart { node: 1 }",
        "checked: VALID",
        "lost acknowledged writes: 0",
    ] {
        assert!(log.contains(needle), "no `{needle}` in:\n{log}");
    }
    assert!(committed(&log) > 100, "too few transfers committed:\n{log}");
}

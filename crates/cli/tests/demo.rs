//! `roost demo`, the README's main command: a short run on a fresh
//! scratch directory must start its cluster without etcd, show the killed
//! node in its progress lines, restart it, and end with the checked verdict.

use std::process::Command;

#[test]
fn the_demo_kills_a_node_and_checks_that_nothing_acknowledged_was_lost() {
    let output = Command::new(env!("CARGO_BIN_EXE_roost"))
        .args(["demo", "--seconds", "8"])
        // No etcd on the PATH: the demo needs none.
        .env("PATH", "/nonexistent")
        .output()
        .expect("roost demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for needle in [
        "nodes up 2/3",
        "nodes up 3/3",
        "Kill { node: 1 }",
        "Restart { node: 1 }",
        "checked: VALID",
        "lost acknowledged writes: 0",
    ] {
        assert!(stdout.contains(needle), "no `{needle}` in:\n{stdout}");
    }
    let committed: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .and_then(|l| l.split_whitespace().next())
        .map(|n| n.replace(',', ""))
        .and_then(|n| n.parse().ok())
        .expect("a summary line");
    assert!(
        committed > 100,
        "only {committed} transfers committed:\n{stdout}"
    );
}

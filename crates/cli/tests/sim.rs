//! `roost sim` as a user runs it: a bounded campaign passes, a planted bug
//! fails with the command that replays it, and that command replays the same
//! seed to the same violation.

use std::process::{Command, Output};

fn roost_sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roost"))
        .arg("sim")
        .args(args)
        .output()
        .expect("roost runs")
}

#[test]
fn roost_sim_campaigns_and_replays() {
    let ok = roost_sim(&["--protocol", "register", "--seeds", "5"]);
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{stdout}");
    assert!(stdout.contains("register: 5 seeds (0..5)"), "{stdout}");
    assert!(stdout.contains("no violations"), "{stdout}");

    let json = roost_sim(&["--seeds", "2", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON line");
    assert_eq!(report["seeds_run"], 2);

    let bad = roost_sim(&["--seeds", "200", "--planted", "quorum-minus-one"]);
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    let replay = stderr
        .lines()
        .find_map(|line| line.strip_prefix("replay it: roost sim "))
        .unwrap_or_else(|| panic!("no replay command in {stderr}"));
    let args: Vec<&str> = replay.split_whitespace().collect();
    let again = roost_sim(&args);
    assert!(!again.status.success());
    let violation = stderr
        .lines()
        .find(|line| line.contains("violates safety"))
        .expect("the violation");
    let replayed = String::from_utf8_lossy(&again.stderr);
    assert!(
        replayed.contains(violation.trim_start_matches("error: ")),
        "{replayed}\nvs\n{violation}"
    );
    // The trace came with it.
    assert!(String::from_utf8_lossy(&again.stdout).contains(" -> "));
}

/// `--planted forget-acceptor-state` brings back seed 2002's violation (a
/// restarted node voting on the first view again); without it the seed passes.
#[test]
fn a_forgotten_acceptor_record_is_found_and_a_kept_one_passes() {
    let seed = ["--protocol", "ownership", "--seed", "2002", "--seeds", "1"];
    let kept = roost_sim(&seed);
    assert!(
        kept.status.success(),
        "{}",
        String::from_utf8_lossy(&kept.stderr)
    );
    let forgot = roost_sim(&[&seed[..], &["--planted", "forget-acceptor-state"]].concat());
    assert!(!forgot.status.success());
    let stderr = String::from_utf8_lossy(&forgot.stderr);
    assert!(stderr.contains("view agreement"), "{stderr}");
}

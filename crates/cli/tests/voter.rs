//! `roost bench voter` end to end on a three-node cluster of `roost node`
//! processes: the popular contestant moves three times under load and
//! stays where she was moved, her voters' reactors follow, the load goes
//! on, every total, tally and voter count is read back and checked; the
//! check catches a planted lost write; bad sizes are refused before any
//! cluster starts.

use std::path::Path;
use std::process::{Command, Output};

/// One cluster at a time: each picks free ports and releases them before
/// its nodes bind, so two starting at once could be handed the same ones.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn voter(out: &Path, extra: &[&str]) -> Output {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Command::new(env!("CARGO_BIN_EXE_roost"))
        .args(["bench", "voter", "--out"])
        .arg(out)
        .args(["--reps", "1", "--clients-per-node", "2"])
        .args(["--voters", "300"])
        .args(extra)
        .output()
        .expect("running roost bench voter")
}

fn log_of(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn the_voter_check_catches_a_lost_write() {
    let out = std::env::temp_dir().join(format!("roost-voter-planted-{}", std::process::id()));
    let output = voter(&out, &["--seconds", "2", "--planted", "skip-voter-count"]);
    let log = log_of(&output);
    assert!(
        !output.status.success(),
        "the lost writes went unnoticed: {log}"
    );
    assert!(
        log.contains("voters' counts are not what their clients counted"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_popular_contestant_moves_three_times_under_a_checked_load() {
    let out = std::env::temp_dir().join(format!("roost-voter-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let output = voter(&out, &["--seconds", "5"]);
    let log = log_of(&output);
    assert!(output.status.success(), "{log}");
    assert!(log.contains("3 moves"), "{log}");
    assert!(log.contains("votes and"), "{log}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("voter.json")).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    let row = |variant: &str| {
        rows.iter()
            .find(|r| r["variant"] == variant)
            .unwrap_or_else(|| panic!("no {variant} row: {log}"))
    };
    let all = row("all votes");
    assert!(all["throughput_tps"].as_f64().unwrap() > 0.0, "{log}");
    assert_eq!(all["extra"]["moves_per_run"].as_f64(), Some(3.0), "{log}");
    assert!(all["extra"]["votes_checked"].as_u64().unwrap() > 0, "{log}");
    assert_eq!(all["extra"]["voter_counts_checked"].as_u64(), Some(900));
    // A thousand votes each: nobody reaches the limit in 6 s.
    assert_eq!(all["extra"]["refused_median"].as_f64(), Some(0.0), "{log}");
    let acquisition = row("ownership acquisition");
    assert!(
        acquisition["extra"]["acquisitions_timed"].as_u64().unwrap() > 0,
        "{log}"
    );
    assert!(acquisition["latency_us"]["p99"].as_f64().unwrap() > 0.0);
    for (i, from_to) in ["node 0 -> node 1", "node 1 -> node 2", "node 2 -> node 0"]
        .iter()
        .enumerate()
    {
        let m = row(&format!("move {}", i + 1));
        assert_eq!(m["extra"]["from_to"], *from_to, "{log}");
        assert_eq!(m["extra"]["owner_held"], true, "{log}");
        assert!(
            m["extra"]["acquisitions_in_2s_after"].as_f64().unwrap() > 0.0,
            "{log}"
        );
        // Her voters' reactors followed her (nine: 30 per node, 10 each).
        assert_eq!(m["extra"]["popular_reactors"].as_u64(), Some(9), "{log}");
        assert_eq!(
            m["extra"]["popular_reactors_with_her_later_median"].as_f64(),
            Some(9.0),
            "{log}"
        );
    }
    let timeline: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["variant"] == "timeline").collect();
    assert_eq!(timeline.len(), 5, "{log}");
    for r in timeline {
        assert!(r["throughput_tps"].as_f64().unwrap() > 0.0, "{log}");
    }
    assert!(out.join("voter.md").exists() && out.join("voter.png").exists());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_sizes_are_refused_before_any_cluster_starts() {
    for (flag, value) in [
        ("--seconds", "-1"),
        ("--seconds", "0"),
        ("--seconds", "NaN"),
        ("--seconds", "1e9"),
        ("--contestants", "0"),
        ("--popular", "NaN"),
        ("--popular", "1"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_roost"))
            .args(["bench", "voter", &format!("{flag}={value}"), "--out"])
            .arg(std::env::temp_dir().join("roost-voter-never-written"))
            .output()
            .expect("running roost bench voter");
        let log = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{flag} {value}: {log}");
        assert!(log.contains(flag), "{flag} {value}: {log}");
        assert!(!log.contains("panicked"), "{flag} {value}: {log}");
    }
}

#[test]
fn the_balancer_spreads_the_popular_contestants_and_their_voters_follow() {
    let out = std::env::temp_dir().join(format!("roost-voter-balance-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let output = voter(&out, &["--balance", "--seconds", "4"]);
    let log = log_of(&output);
    assert!(output.status.success(), "{log}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("voter_balance.json")).unwrap())
            .unwrap();
    let rows = json["rows"].as_array().unwrap();
    let all = rows
        .iter()
        .find(|r| r["variant"] == "all votes")
        .unwrap_or_else(|| panic!("no all-votes row: {log}"));
    let extra = &all["extra"];
    let number = |name: &str| {
        extra[name]
            .as_f64()
            .unwrap_or_else(|| panic!("no {name}: {log}"))
    };
    // The three popular contestants start at one node, which then serves
    // about 0.6 + 0.4 / 3 of the votes; the balancer spreads them, one a
    // node, and every one of her voters' reactors follows her.
    assert!(
        number("busiest_node_share_first_second_median") > 0.6,
        "{log}"
    );
    assert!(
        number("busiest_node_share_last_two_seconds_median") < 0.45,
        "{log}"
    );
    assert_eq!(
        number("popular_contestants_nodes_at_end_median"),
        3.0,
        "{log}"
    );
    assert_eq!(extra["popular_voter_reactors"].as_u64(), Some(54), "{log}");
    assert_eq!(
        number("popular_voter_reactors_with_their_contestant_at_end_median"),
        54.0,
        "{log}"
    );
    assert!(number("balancer_moves_median") >= 2.0, "{log}");
    assert!(extra["votes_checked"].as_u64().unwrap() > 0, "{log}");
    assert_eq!(extra["voter_counts_checked"].as_u64(), Some(900), "{log}");
    // What moved were popular contestants, off the node they started at.
    let moves: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| r["variant"] == "balancer move")
        .collect();
    assert!(moves.len() >= 2, "{log}");
    for m in moves {
        let what = m["extra"]["what"].as_str().unwrap();
        assert!(what.starts_with("popular contestant"), "{what}: {log}");
    }
    assert!(out.join("voter_balance.md").exists() && out.join("voter_balance.png").exists());
    let _ = std::fs::remove_dir_all(&out);
}

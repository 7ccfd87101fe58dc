//! `roost bench smallbank` end to end on a three-node cluster of `roost
//! node` processes: the three systems run and write their rows, static
//! sharding moves no reactor while Roost's cross-partition transactions
//! move some, and the balance check (every balance read back and summed
//! against each transaction's reported change) catches a planted lost
//! update in the 2PC baseline.

use std::path::Path;
use std::process::{Command, Output};

/// One cluster at a time: each picks free ports and releases them before
/// its nodes bind, so two starting at once could be handed the same ones.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn smallbank(out: &Path, extra: &[&str]) -> Output {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Command::new(env!("CARGO_BIN_EXE_roost"))
        .args(["bench", "smallbank", "--out"])
        .arg(out)
        .args(["--reps", "1", "--seconds", "1", "--clients-per-node", "4"])
        .args(["--reactors", "96"])
        .args(extra)
        .output()
        .expect("running roost bench smallbank")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn the_three_systems_run_checked_and_only_roost_moves_reactors() {
    let out = tempfile_dir("run");
    let output = smallbank(&out, &["--accounts", "2000", "--remote", "0,0.2"]);
    let log = text(&output);
    assert!(output.status.success(), "{log}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("smallbank.json")).unwrap())
            .unwrap();
    let rows = json["rows"].as_array().unwrap();
    let row = |system: &str, remote: f64| {
        rows.iter()
            .find(|r| {
                r["system"] == system && r["params"]["remote_percent"].as_f64() == Some(remote)
            })
            .unwrap_or_else(|| panic!("no {system} row at {remote}%: {log}"))
    };
    for (system, remote) in [
        ("perfect", 0.0),
        ("static-2pc", 0.0),
        ("roost", 0.0),
        ("static-2pc", 20.0),
        ("roost", 20.0),
    ] {
        let r = row(system, remote);
        assert!(
            r["throughput_tps"].as_f64().unwrap() > 0.0,
            "{system} {remote}: {r}"
        );
        let measured = r["extra"]["cross_percent_measured"].as_f64().unwrap();
        assert!(
            (measured - remote).abs() < 5.0,
            "{system} at {remote}% crossed {measured}%"
        );
    }
    assert_eq!(
        row("static-2pc", 20.0)["extra"]["moves_median"].as_f64(),
        Some(0.0)
    );
    assert!(
        row("roost", 20.0)["extra"]["moves_median"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{log}"
    );
    assert_eq!(
        row("perfect", 0.0)["extra"]["moves_median"].as_f64(),
        Some(0.0)
    );
    assert_eq!(log.matches("total checked").count(), 5, "{log}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_balance_check_catches_a_2pc_baseline_that_loses_updates() {
    let out = tempfile_dir("planted");
    // Few hot accounts and many crossing transactions: one-node
    // transactions keep writing accounts a 2PC has locked and read.
    let output = smallbank(
        &out,
        &[
            "--accounts",
            "200",
            "--remote",
            "0.4",
            "--planted",
            "local-ignores-locks",
        ],
    );
    let log = text(&output);
    assert!(
        !output.status.success(),
        "the lost updates went unnoticed: {log}"
    );
    assert!(log.contains("the balances add up to"), "{log}");
    let _ = std::fs::remove_dir_all(&out);
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "roost-smallbank-test-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

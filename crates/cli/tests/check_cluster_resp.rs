//! `roost check list-append|bank|rw-register --cluster 3`: one database over
//! three `roost node --protocol ownership` processes (Zeus) and a real etcd,
//! RESP clients (the `redis` crate) on every node running MULTI/EXEC and
//! WATCH transactions over keys owned by different nodes, while the nemesis
//! kills and restarts, pauses, partitions, drops, delays, duplicates and cuts
//! etcd off. The histories are strictly serializable and nothing
//! acknowledged is lost; with a planted bug (a reply before the reliable
//! commit) the same run is invalid. CI runs this bounded slice; the full
//! campaign is `roost check list-append --cluster 3 --seconds 600`.

use std::sync::Mutex;

#[path = "common/check_run.rs"]
mod check_run;
mod common;

use check_run::{roost_check, CheckRun};
use common::require_etcd;

/// One cluster at a time: three nodes, etcd and the clients share two cores.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

fn check_cluster(workload: &str, seconds: &str, extra: &[&str]) -> CheckRun {
    check_cluster_with(workload, seconds, "all", "600", extra)
}

fn check_cluster_with(
    workload: &str,
    seconds: &str,
    nemesis: &str,
    interval_ms: &str,
    extra: &[&str],
) -> CheckRun {
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!("roost-check-resp-{workload}-{nemesis}-{}", extra.len());
    let mut args = vec![workload, "--cluster", "3", "--seconds", seconds];
    args.extend([
        "--fault-interval-ms",
        interval_ms,
        "--nemesis",
        nemesis,
        "--seed",
        "5",
    ]);
    args.extend(extra);
    roost_check(&name, &args)
}

/// The number after `label` in the output (`ops ok 123 /`).
fn count_after(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no `{label}` in: {text}"));
    text[at + label.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no count after `{label}` in: {text}"))
}

/// A valid run: the verdict, real work done, real faults struck, no fault
/// failed to apply, nothing acknowledged lost.
fn assert_valid(run: &CheckRun, min_faults: usize) {
    let text = &run.text;
    assert!(run.ok, "{text}");
    assert!(text.contains("VALID:"), "{text}");
    assert!(
        count_after(text, "ops ok ") >= 1_000,
        "too little done: {text}"
    );
    assert_eq!(count_after(text, "lost acknowledged writes: "), 0, "{text}");
    let struck = run.struck();
    assert!(
        struck.len() >= min_faults,
        "{} faults, wanted {min_faults}: {text}",
        struck.len()
    );
    assert!(
        struck.iter().all(|l| !l.contains("\"error\"")),
        "{:?}",
        struck
    );
    // The nemesis killed (and restarted) nodes, not only slowed links.
    assert!(
        struck.iter().any(|l| l.contains("\"kill\"")),
        "{:?}",
        struck
    );
}

#[test]
fn list_append_over_resp_on_every_node_is_strictly_serializable_under_the_nemesis() {
    require_etcd();
    let run = check_cluster("list-append", "30", &[]);
    assert_valid(&run, 40);
}

#[test]
fn bank_transfers_with_watch_on_every_node_conserve_the_total_under_the_nemesis() {
    require_etcd();
    let run = check_cluster("bank", "15", &[]);
    assert_valid(&run, 15);
}

#[test]
fn registers_over_resp_on_every_node_are_strictly_serializable_under_the_nemesis() {
    require_etcd();
    let run = check_cluster("rw-register", "15", &[]);
    assert_valid(&run, 15);
}

#[test]
fn a_reply_before_the_reliable_commit_is_caught() {
    require_etcd();
    let run = check_cluster(
        "list-append",
        "15",
        &["--planted-zeus", "reply-before-commit"],
    );
    assert!(
        !run.ok,
        "a reply before the reliable commit passed: {}",
        run.text
    );
    assert!(run.text.contains("INVALID:"), "{}", run.text);
    assert!(
        run.text.contains("not strictly serializable"),
        "{}",
        run.text
    );
}

/// Durability (issue 21): the whole cluster SIGKILLed at once, again and
/// again, and restarted from the nodes' logs: the history stays strictly
/// serializable and no acknowledged append is lost.
#[test]
fn list_append_survives_the_whole_cluster_sigkilled_at_once() {
    require_etcd();
    let run = check_cluster_with("list-append", "20", "kill-all", "3000", &[]);
    let text = &run.text;
    assert!(run.ok && text.contains("VALID:"), "{text}");
    assert_eq!(count_after(text, "lost acknowledged writes: "), 0, "{text}");
    assert!(
        count_after(text, "ops ok ") >= 1_000,
        "too little done: {text}"
    );
    let struck = run.struck();
    let kills = struck.iter().filter(|l| l.contains("\"kill-all\"")).count();
    assert!(kills >= 3, "{kills} whole-cluster kills: {struck:?}");
    assert!(
        struck.iter().all(|l| !l.contains("\"error\"")),
        "{struck:?}"
    );
}

/// The same run with nodes that answer before their log is on disk loses
/// acknowledged appends, and the checker says so.
#[test]
fn answering_before_the_log_is_on_disk_is_caught_by_a_whole_cluster_kill() {
    require_etcd();
    let run = check_cluster_with(
        "list-append",
        "15",
        "kill-all",
        "3000",
        &["--planted-zeus", "answer-before-fsync"],
    );
    assert!(!run.ok, "answering before the fsync passed: {}", run.text);
    assert!(run.text.contains("INVALID:"), "{}", run.text);
    assert!(
        count_after(&run.text, "lost acknowledged writes: ") > 0,
        "{}",
        run.text
    );
}

//! `roost check ... --cluster N` as the multi-process checker tests run it:
//! its history in a scratch directory, its output and its fault log read
//! back, the directory removed.

use std::process::Command;

/// What one `roost check` run said.
pub struct CheckRun {
    /// It exited zero (the history was valid).
    pub ok: bool,
    /// Its stdout and stderr.
    pub text: String,
    /// The fault log's lines (`<history>.faults.jsonl`).
    pub faults: Vec<String>,
}

impl CheckRun {
    /// The faults the nemesis struck (each logged with its time).
    pub fn struck(&self) -> Vec<&String> {
        self.faults
            .iter()
            .filter(|l| l.contains("\"at_ns\""))
            .collect()
    }
}

/// Runs `roost check <args> --out <scratch>/history.jsonl` (scratch named
/// after `name` and this process).
pub fn roost_check(name: &str, args: &[&str]) -> CheckRun {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("history.jsonl");
    let output = Command::new(env!("CARGO_BIN_EXE_roost"))
        .arg("check")
        .args(args)
        .arg("--out")
        .arg(&out)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run roost check");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let faults = std::fs::read_to_string(out.with_extension("faults.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    CheckRun {
        ok: output.status.success(),
        text,
        faults,
    }
}

//! Helpers shared by the multi-process tests.

use std::process::{Command, Stdio};

/// Fails the test, saying what to install, when Debian's etcd-server is
/// missing (`scripts/test.sh` installs it first): a missing peer is never a
/// silent pass.
pub fn require_etcd() {
    let found = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "etcd is not installed: run scripts/install-deps.sh (or apt-get install etcd-server)"
    );
}

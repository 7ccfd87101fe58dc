//! Helpers shared by the multi-process tests.

use std::process::{Command, Stdio};

/// Is Debian's etcd-server installed? Without it the etcd tests are skipped
/// with a notice, unless `ROOST_REQUIRE_PEERS=1` (which `.ci/run` sets, after
/// installing it) makes its absence a failure.
pub fn etcd_or_skip(test: &str) -> bool {
    let found = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("ROOST_REQUIRE_PEERS").as_deref() != Ok("1"),
            "etcd is not installed (apt-get install etcd-server) and ROOST_REQUIRE_PEERS=1"
        );
        println!("notice: etcd not installed (Debian's etcd-server); skipping {test}");
    }
    found
}

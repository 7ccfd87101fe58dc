//! Child processes that never outlive the process that started them.

use std::os::unix::process::CommandExt as _;
use std::process::Command;

/// Makes the child of `command` receive SIGKILL when its parent dies (Linux
/// `PR_SET_PDEATHSIG`), so a local cluster, etcd or benchmark peer is never
/// left orphaned holding its ports, even if the parent is itself SIGKILLed
/// before its cleanup runs.
pub fn die_with_parent(command: &mut Command) {
    // SAFETY: prctl(2) is async-signal-safe; between fork and exec it only
    // sets a flag on the child in the kernel.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

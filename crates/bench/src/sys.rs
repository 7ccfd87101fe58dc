//! Process facts the benchmarks report.

/// Page size assumed for `/proc/self/statm` (x86-64 and most aarch64 Linux).
pub const PAGE_BYTES: u64 = 4096;

/// Resident set size of this process in bytes, from `/proc/self/statm`; `None`
/// where that file does not exist (not Linux) or cannot be parsed.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    parse_statm_resident_bytes(&statm)
}

/// `size resident shared text lib data dt` (in pages) -> resident bytes.
fn parse_statm_resident_bytes(statm: &str) -> Option<u64> {
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    resident_pages.checked_mul(PAGE_BYTES)
}

/// CPU time counters, in clock ticks: the whole machine's (from the first
/// line of `/proc/stat`) and this process's (from `/proc/self/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    pub machine_busy: u64,
    pub machine_total: u64,
    pub own: u64,
}

impl CpuSample {
    /// `None` where the files do not exist (not Linux) or cannot be parsed.
    pub fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (machine_busy, machine_total) = parse_proc_stat(&stat)?;
        Some(CpuSample {
            machine_busy,
            machine_total,
            own: parse_own_ticks(&own)?,
        })
    }

    /// Share of the machine's CPU time between `self` and `later` that other
    /// processes used (0 to 1): how much a measurement had to share the
    /// machine.
    pub fn others_share(&self, later: &CpuSample) -> f64 {
        let total = later.machine_total.saturating_sub(self.machine_total);
        if total == 0 {
            return 0.0;
        }
        let busy = later.machine_busy.saturating_sub(self.machine_busy);
        let own = later.own.saturating_sub(self.own);
        (busy.saturating_sub(own) as f64 / total as f64).clamp(0.0, 1.0)
    }
}

/// `cpu  user nice system idle iowait irq softirq steal ...` -> (busy, total).
fn parse_proc_stat(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if fields.len() < 8 {
        return None;
    }
    let idle = fields[3] + fields[4];
    let busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7];
    Some((busy, busy + idle))
}

/// utime + stime (fields 14 and 15) of `/proc/self/stat`; the command name
/// (field 2) may hold spaces, so fields are counted after its `)`.
fn parse_own_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statm_parsing() {
        assert_eq!(
            parse_statm_resident_bytes("1000 250 30 4 0 500 0\n"),
            Some(250 * PAGE_BYTES)
        );
        assert_eq!(parse_statm_resident_bytes("1000"), None);
        assert_eq!(parse_statm_resident_bytes("1000 x"), None);
    }

    #[test]
    fn cpu_counters_parse() {
        let stat = "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse_proc_stat(stat), Some((161, 1181)));
        assert_eq!(parse_proc_stat("cpu  1 2"), None);
        let own = "42 (roost (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 70 30 0 0 20 0";
        assert_eq!(parse_own_ticks(own), Some(100));
        assert_eq!(parse_own_ticks("garbage"), None);
        let a = CpuSample {
            machine_busy: 100,
            machine_total: 200,
            own: 50,
        };
        let b = CpuSample {
            machine_busy: 180,
            machine_total: 400,
            own: 110,
        };
        assert!((a.others_share(&b) - 0.1).abs() < 1e-12);
        assert_eq!(a.others_share(&a), 0.0);
        if cfg!(target_os = "linux") {
            assert!(CpuSample::now().is_some());
        }
    }

    #[test]
    fn this_process_has_a_resident_set_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
        }
    }
}

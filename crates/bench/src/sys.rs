//! Process facts the benchmarks report.

use std::time::{Duration, Instant};

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
            own: parse_stat_ticks(&own)?,
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

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` (or
/// `/proc/self/stat`, or a thread's `/proc/<pid>/task/<tid>/stat`); the
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted after its last `)`.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

/// The command name (field 2, between the first `(` and the last `)`) of a
/// `/proc/.../stat` line: a thread's name for a task's stat.
fn parse_stat_name(stat: &str) -> Option<&str> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    (open < close).then(|| &stat[open + 1..close])
}

/// Clock ticks per second of the `/proc` CPU counters
/// (`sysconf(_SC_CLK_TCK)`; 100, Linux's USER_HZ, where it cannot be read).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// The CPU time (user + system, every thread, exited ones included) a
/// process has used so far, from its `/proc/<pid>/stat`, in clock ticks.
/// Two samples around a stretch of work give the CPU the work cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessCpu {
    pub ticks: u64,
}

impl ProcessCpu {
    /// Process `pid`'s counters; `None` where it does not exist (or exited
    /// and was reaped), or on a system without `/proc`.
    pub fn of_pid(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(ProcessCpu {
            ticks: parse_stat_ticks(&stat)?,
        })
    }

    /// This process's counters.
    pub fn own() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        Some(ProcessCpu {
            ticks: parse_stat_ticks(&stat)?,
        })
    }

    /// CPU microseconds between `earlier` and `self` (0 if the counters went
    /// backwards, which they do not for one process).
    pub fn us_since(&self, earlier: &ProcessCpu) -> f64 {
        ticks_to_us(self.ticks.saturating_sub(earlier.ticks))
    }
}

/// Clock ticks -> microseconds at this system's tick rate.
pub fn ticks_to_us(ticks: u64) -> f64 {
    ticks as f64 * 1e6 / clock_ticks_per_second() as f64
}

/// One thread of this process: its id, name and CPU ticks so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCpu {
    pub tid: u32,
    pub name: String,
    pub ticks: u64,
}

/// Every live thread of this process (`/proc/self/task/*/stat`); empty
/// without `/proc`. Threads that exit meanwhile are skipped.
pub fn own_threads() -> Vec<ThreadCpu> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut threads: Vec<ThreadCpu> = tasks
        .flatten()
        .filter_map(|task| {
            let tid: u32 = task.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            Some(ThreadCpu {
                tid,
                name: parse_stat_name(&stat)?.to_owned(),
                ticks: parse_stat_ticks(&stat)?,
            })
        })
        .collect();
    threads.sort_by_key(|t| t.tid);
    threads
}

/// CPU time this process (all its threads) has used so far, from
/// `getrusage(RUSAGE_SELF)`: microsecond resolution, where `/proc`'s
/// counters step in clock ticks (10 ms).
pub fn own_cpu_time() -> Option<Duration> {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the call to fill.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let micros = |t: libc::timeval| -> Option<u64> {
        let secs = u64::try_from(t.tv_sec).ok()?;
        let usecs = u64::try_from(t.tv_usec).ok()?;
        secs.checked_mul(1_000_000)?.checked_add(usecs)
    };
    let total = micros(usage.ru_utime)?.checked_add(micros(usage.ru_stime)?)?;
    Some(Duration::from_micros(total))
}

/// What [`measure_own_cpu`] saw.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuWindow {
    /// Wall-clock length of the window.
    pub wall: Duration,
    /// CPU time the whole process used in it.
    pub cpu: Duration,
    /// Per thread that used any CPU in the window: its name and CPU
    /// milliseconds (clock-tick resolution), busiest first.
    pub busiest_threads: Vec<(String, f64)>,
}

impl CpuWindow {
    /// The process's CPU as a percentage of one core (100 = one core busy
    /// the whole window; up to 100 x cores).
    pub fn percent_of_core(&self) -> f64 {
        let wall = self.wall.as_secs_f64();
        if wall <= 0.0 {
            return 0.0;
        }
        self.cpu.as_secs_f64() / wall * 100.0
    }
}

/// Sleeps for `window` and measures the CPU time every thread of this
/// process used meanwhile (the caller's own sleep costs next to nothing):
/// the idle cost of whatever the process keeps running. `None` where the
/// process's CPU time cannot be read.
pub fn measure_own_cpu(window: Duration) -> Option<CpuWindow> {
    let threads_before = own_threads();
    let started = Instant::now();
    let before = own_cpu_time()?;
    std::thread::sleep(window);
    let after = own_cpu_time()?;
    let wall = started.elapsed();
    let threads_after = own_threads();
    let mut busiest_threads: Vec<(String, f64)> = threads_after
        .iter()
        .filter_map(|t| {
            let earlier = threads_before
                .iter()
                .find(|b| b.tid == t.tid)
                .map_or(0, |b| b.ticks);
            let ticks = t.ticks.saturating_sub(earlier);
            (ticks > 0).then(|| (t.name.clone(), ticks_to_us(ticks) / 1e3))
        })
        .collect();
    busiest_threads.sort_by(|a, b| b.1.total_cmp(&a.1));
    Some(CpuWindow {
        wall,
        cpu: after.saturating_sub(before),
        busiest_threads,
    })
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
        assert_eq!(parse_stat_ticks(own), Some(100));
        assert_eq!(parse_stat_ticks("garbage"), None);
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

    /// A `/proc/<pid>/stat` line shaped like redis-server's on Linux 6.x:
    /// utime 1234 and stime 567 are fields 14 and 15.
    const REDIS_STAT: &str = "4242 (redis-server) S 4200 4242 4200 0 -1 4194560 3067 0 0 0 \
        1234 567 0 0 20 0 5 0 987654 77938688 2539 18446744073709551615 1 1 0 0 0 0 0 4097 \
        17610 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0";

    #[test]
    fn per_pid_stat_parsing() {
        assert_eq!(parse_stat_ticks(REDIS_STAT), Some(1234 + 567));
        assert_eq!(parse_stat_name(REDIS_STAT), Some("redis-server"));
        // A thread name with spaces and parentheses: fields count from the last `)`.
        let odd = "17 (exec 3) (x)) R 1 17 17 0 -1 0 0 0 0 0 9 1 0 0 20 0";
        assert_eq!(parse_stat_ticks(odd), Some(10));
        assert_eq!(parse_stat_name(odd), Some("exec 3) (x)"));
        // Truncated, non-numeric and overflowing counters are refused.
        assert_eq!(parse_stat_ticks("4242 (redis-server) S 4200 4242"), None);
        assert_eq!(parse_stat_ticks("1 (a) S 0 0 0 0 0 0 0 0 0 0 x 5"), None);
        let huge = format!("1 (a) S 0 0 0 0 0 0 0 0 0 0 {} 1", u64::MAX);
        assert_eq!(parse_stat_ticks(&huge), None);
        assert_eq!(parse_stat_name("no name here"), None);
        assert!(clock_ticks_per_second() > 0);
        assert_eq!(
            ProcessCpu { ticks: 250 }.us_since(&ProcessCpu { ticks: 50 }),
            200.0 * 1e6 / clock_ticks_per_second() as f64
        );
        assert_eq!(
            ProcessCpu { ticks: 5 }.us_since(&ProcessCpu { ticks: 50 }),
            0.0
        );
    }

    #[test]
    fn own_and_pid_counters_agree_on_linux() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let own = ProcessCpu::own().expect("/proc/self/stat");
        let by_pid = ProcessCpu::of_pid(std::process::id()).expect("/proc/<pid>/stat");
        assert!(by_pid.ticks >= own.ticks);
        assert!(ProcessCpu::of_pid(u32::MAX).is_none());
        let threads = own_threads();
        assert!(threads.iter().any(|t| t.tid == std::process::id()));
        assert!(own_cpu_time().is_some());
    }

    #[test]
    fn this_process_has_a_resident_set_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
        }
    }
}

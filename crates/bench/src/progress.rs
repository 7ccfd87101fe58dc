//! A benchmark's progress: a bar on the terminal (standard error, redrawn
//! in place) while a cell runs, and one line per finished cell on standard
//! output, which is what a log or a pipe keeps.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Characters the bar itself takes.
const BAR_WIDTH: usize = 30;

/// Progress through `total` cells.
pub struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    /// Standard error is a terminal: draw the bar.
    live: bool,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress {
            total,
            done: 0,
            started: Instant::now(),
            live: std::io::stderr().is_terminal(),
        }
    }

    /// A cell called `what` starts: the bar says so (on a terminal).
    pub fn start(&mut self, what: &str) {
        if self.live {
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[2K{} {what}",
                status(self.done, self.total, self.started.elapsed())
            );
            let _ = err.flush();
        }
    }

    /// A cell ended: its line, after the cells done and the time so far.
    pub fn finish(&mut self, line: &str) {
        self.done = (self.done + 1).min(self.total.max(1));
        if self.live {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
        println!(
            "[{:>3}/{} {:>5.0} s] {line}",
            self.done,
            self.total,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// `[#####.....]  3/10  40 s, about 1m33s left`: the cells done, the time
/// so far and the time left at the pace so far.
pub fn status(done: usize, total: usize, elapsed: Duration) -> String {
    let total = total.max(1);
    let done = done.min(total);
    let filled = BAR_WIDTH * done / total;
    let bar = format!("{}{}", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled));
    let left = if done == 0 {
        "estimating".to_owned()
    } else {
        let secs = elapsed.as_secs_f64() / done as f64 * (total - done) as f64;
        format!("about {}m{:02}s left", secs as u64 / 60, secs as u64 % 60)
    };
    format!(
        "[{bar}] {done:>3}/{total} {:>5.0} s, {left}",
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_with_the_cells_done_and_estimates_what_is_left() {
        let none = status(0, 10, Duration::from_secs(0));
        assert!(none.starts_with(&format!("[{}]", ".".repeat(BAR_WIDTH))));
        assert!(none.contains("estimating"));
        let third = status(3, 9, Duration::from_secs(60));
        assert!(third.starts_with(&format!("[{}{}]", "#".repeat(10), ".".repeat(20))));
        // 20 s a cell, 6 cells left.
        assert!(third.contains("about 2m00s left"), "{third}");
        let all = status(9, 9, Duration::from_secs(90));
        assert!(all.starts_with(&format!("[{}]", "#".repeat(BAR_WIDTH))));
        assert!(all.contains("about 0m00s left"));
        // Out of range counts are clamped, not a panic.
        assert!(status(12, 0, Duration::from_secs(1)).contains("1/1"));
    }
}

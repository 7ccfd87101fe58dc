//! The idle-CPU probe (`sys::measure_own_cpu`, which `roost bench smartmart`
//! uses for "idle CPU of an idle node") reads what the process really does:
//! threads spinning through the window read most of a core, a sleeping
//! process next to nothing. Its own test binary with one test, so no other
//! test's threads run in the process while it measures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use roost_bench::sys::measure_own_cpu;

const WINDOW: Duration = Duration::from_millis(200);

#[test]
fn busy_reads_busy_and_sleeping_reads_idle() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    // Two spinners, so that the busy window reads over a quarter of a core
    // even where other processes (builds, other test binaries) load the
    // machine's two cores (a CI run saw 48.9% while a build ran beside it).
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("spinner".into())
                .spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                    x
                })
                .expect("spawn")
        })
        .collect();
    // Let the spinner get onto a core before the window opens.
    std::thread::sleep(Duration::from_millis(20));
    let busy = measure_own_cpu(WINDOW).expect("process CPU time");
    stop.store(true, Ordering::Relaxed);
    for spinner in spinners {
        spinner.join().expect("spinner");
    }
    let idle = measure_own_cpu(WINDOW).expect("process CPU time");

    println!(
        "busy: {:.1}% of a core, idle: {:.1}% of a core",
        busy.percent_of_core(),
        idle.percent_of_core()
    );
    assert!(busy.wall >= WINDOW && idle.wall >= WINDOW);
    assert!(
        busy.percent_of_core() > 25.0,
        "two spinning threads read only {:.1}% of a core ({busy:?})",
        busy.percent_of_core()
    );
    assert!(
        idle.percent_of_core() < 10.0,
        "a sleeping process read {:.1}% of a core ({idle:?})",
        idle.percent_of_core()
    );
    // The per-thread breakdown names the spinner as the busy thread.
    assert_eq!(
        busy.busiest_threads.first().map(|(name, _)| name.as_str()),
        Some("spinner"),
        "{busy:?}"
    );
}

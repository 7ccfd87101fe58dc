//! `roost demo`: SmartMart on the embedded default. One node, the async
//! deployment (carts in one container, each store section in its own), client
//! threads running add_items + checkout interactions for a while with a live
//! progress line; then the same orders on the sync deployment (everything in
//! one container) for the comparison, and a readable summary.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::{DataConfig, DeploymentKind, OrderGenerator, Probe, SectionChoice, SmartMart};

const ITEMS_PER_SECTION: u32 = 1_000;
const PROGRESS_INTERVAL: Duration = Duration::from_millis(500);

/// What `roost demo` runs.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    pub seconds: f64,
    pub workers: usize,
    pub order_size: usize,
    pub sections: usize,
    pub window: u32,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            seconds: 10.0,
            workers: 1,
            order_size: 32,
            sections: 8,
            window: 150,
        }
    }
}

/// One deployment's measured run.
struct RunResult {
    interactions: u64,
    retries: u64,
    elapsed: Duration,
    latency_us: Histogram<u64>,
}

impl RunResult {
    fn tps(&self) -> f64 {
        self.interactions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn abort_rate(&self) -> f64 {
        self.retries as f64 / (self.interactions + self.retries).max(1) as f64
    }
}

pub fn run_demo(config: &DemoConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.seconds > 0.0 && config.seconds <= 3600.0,
        "--seconds must be in (0, 3600]"
    );
    anyhow::ensure!(
        (1..=64).contains(&config.workers),
        "--workers must be 1..=64"
    );
    anyhow::ensure!(
        (1..=8).contains(&config.sections),
        "--sections must be 1..=8"
    );
    println!(
        "Roost demo: SmartMart, {} worker(s), orders of {} items over {} store sections, history window {}",
        config.workers, config.order_size, config.sections, config.window
    );
    let async_run = run_deployment(config, DeploymentKind::Async, config.seconds, true)?;
    let sync_run = run_deployment(
        config,
        DeploymentKind::Sync,
        (config.seconds / 2.0).max(1.0),
        false,
    )?;
    print_summary(&async_run, &sync_run);
    Ok(())
}

fn run_deployment(
    config: &DemoConfig,
    kind: DeploymentKind,
    seconds: f64,
    live: bool,
) -> anyhow::Result<RunResult> {
    let data = DataConfig {
        sections: config.sections,
        items_per_section: ITEMS_PER_SECTION,
        history_len: config.window.max(1),
        carts: config.workers,
        groups: 4,
        cart_executors: config.workers,
        load_threads: 2,
    };
    print!("loading the {} deployment ... ", kind.name());
    std::io::stdout().flush().ok();
    let mart = SmartMart::new(kind, &data).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "{} reactors loaded in {:.2} s",
        mart.topology.carts.len() * 2 + 5 + config.sections,
        mart.load_time.as_secs_f64()
    );
    let generator = OrderGenerator::new(
        config.order_size,
        SectionChoice::Fixed {
            sections: config.sections,
        },
        config.sections,
        ITEMS_PER_SECTION,
        config.window,
        0,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (done, interactions, retries) =
        (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
    let latency = Mutex::new(Histogram::<u64>::new(3).expect("histogram"));
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let duration = Duration::from_secs_f64(seconds);
    let started = Instant::now();
    std::thread::scope(|s| {
        for worker in 0..config.workers {
            let (mart, generator, done, interactions, retries, latency, failure) = (
                &mart,
                &generator,
                &done,
                &interactions,
                &retries,
                &latency,
                &failure,
            );
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(0x5EED + worker as u64);
                let probe = Arc::new(Probe::default());
                let mut local = Histogram::<u64>::new(3).expect("histogram");
                while !done.load(Ordering::Relaxed) {
                    let order = Arc::new(generator.next(&mut rng));
                    let t0 = Instant::now();
                    match mart.interaction(worker, &order, &probe) {
                        Ok(_) => {
                            let _ = local.record(t0.elapsed().as_micros() as u64);
                            interactions.fetch_add(1, Ordering::Relaxed);
                            retries.fetch_add(
                                probe.take_attempts().saturating_sub(1),
                                Ordering::Relaxed,
                            );
                        }
                        Err(e) => {
                            *failure.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(e.to_string());
                            done.store(true, Ordering::Relaxed);
                        }
                    }
                }
                let _ = latency
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(&local);
            });
        }
        while started.elapsed() < duration && !done.load(Ordering::Relaxed) {
            std::thread::sleep(PROGRESS_INTERVAL);
            if live {
                let n = interactions.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64();
                print!(
                    "\r  {:>5.1} s  {:>8} interactions  {:>8.0} per second  {:>6} retried   ",
                    secs,
                    n,
                    n as f64 / secs,
                    retries.load(Ordering::Relaxed)
                );
                std::io::stdout().flush().ok();
            }
        }
        done.store(true, Ordering::Relaxed);
    });
    if live {
        println!();
    }
    if let Some(error) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        anyhow::bail!(
            "an interaction failed on the {} deployment: {error}",
            kind.name()
        );
    }
    Ok(RunResult {
        interactions: interactions.into_inner(),
        retries: retries.into_inner(),
        elapsed: started.elapsed(),
        latency_us: latency.into_inner().unwrap_or_else(|p| p.into_inner()),
    })
}

fn print_summary(async_run: &RunResult, sync_run: &RunResult) {
    println!();
    println!("deployment   interactions   per second   p50 ms   p99 ms   retried");
    for (name, run) in [("async", async_run), ("sync", sync_run)] {
        println!(
            "{name:<10} {:>14} {:>12.0} {:>8.2} {:>8.2} {:>8.2}%",
            run.interactions,
            run.tps(),
            run.latency_us.value_at_quantile(0.5) as f64 / 1000.0,
            run.latency_us.value_at_quantile(0.99) as f64 / 1000.0,
            run.abort_rate() * 100.0
        );
    }
    let speedup = async_run.tps() / sync_run.tps().max(1e-9);
    println!(
        "\nasync over sync: {speedup:.2}x (store sections work in parallel on their own executors; this machine has {} cores)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
}

//! SmartMart under both deployments: serializability of concurrent
//! interactions (stock and sales conserved), identical results for the same
//! orders, the moving history window, and a tiny end-to-end benchmark run.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::*;
use crate::results::BenchReport;

const ITEMS: u32 = 16;
const HISTORY: u32 = 12;

fn data(carts: usize) -> DataConfig {
    DataConfig {
        sections: STORE_SECTIONS,
        items_per_section: ITEMS,
        history_len: HISTORY,
        carts,
        groups: 2,
        cart_executors: carts.min(2),
        load_threads: 2,
    }
}

fn orders(seed: u64, n: usize, choice: SectionChoice, delay: u64) -> Vec<Arc<Order>> {
    let generator = OrderGenerator::new(8, choice, STORE_SECTIONS, ITEMS, 10, delay).unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| Arc::new(generator.next(&mut rng))).collect()
}

/// Concurrent interactions on a small store (8 x 16 items: many conflicts)
/// commit exactly what the sections sold, and every sale is in the history.
fn concurrent_interactions_conserve_stock(kind: DeploymentKind) {
    let mart = SmartMart::new(kind, &data(3)).expect("mart");
    let receipts: Vec<(u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|cart| {
                let mart = &mart;
                s.spawn(move || {
                    let probe = Arc::new(Probe::default());
                    let mut sold = (0, 0);
                    for order in orders(cart as u64, 25, SectionChoice::Random { sections: 3 }, 0) {
                        let receipt = mart.interaction(cart, &order, &probe).expect("commits");
                        assert_eq!(receipt.totals.items as usize, order.items());
                        assert_eq!(receipt.totals.quantity, order.quantity());
                        sold.0 += receipt.totals.quantity;
                        sold.1 += u64::from(receipt.totals.items);
                    }
                    sold
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (quantity, items) = receipts
        .iter()
        .fold((0, 0), |acc, r| (acc.0 + r.0, acc.1 + r.1));
    let sections = mart.section_sales().expect("read sections");
    let stock_sold: u64 = sections.iter().map(|s| s.0).sum();
    let history_sales: u64 = sections.iter().map(|s| s.1).sum();
    assert_eq!(stock_sold, quantity, "stock taken = quantities committed");
    assert_eq!(history_sales, items, "one history row per item sold");
    // Every cart's un-awaited sale record committed with its interaction.
    for cart in 0..3 {
        let sales = mart.sales_of(cart).expect("sales");
        assert_eq!(sales.len(), 16, "the last KEPT_SESSIONS sales are kept");
        assert_eq!(sales.last().unwrap().0, 25, "the newest session's sale");
    }
}

/// The same orders give the same receipts under both deployments, the Delay
/// variant included.
fn same_results_under_both_deployments(delay: u64) {
    let run = |kind| {
        let mart = SmartMart::new(kind, &data(1)).expect("mart");
        let probe = Arc::new(Probe::default());
        orders(7, 12, SectionChoice::Fixed { sections: 4 }, delay)
            .iter()
            .map(|o| mart.interaction(0, o, &probe).expect("commits"))
            .collect::<Vec<_>>()
    };
    let sync = run(DeploymentKind::Sync);
    assert!(sync.iter().any(|r| r.totals.var_disc_cents > 0));
    assert_eq!(sync, run(DeploymentKind::Async));
}

#[test]
fn sync_concurrent_interactions_conserve_stock() {
    concurrent_interactions_conserve_stock(DeploymentKind::Sync);
}

#[test]
fn async_concurrent_interactions_conserve_stock() {
    concurrent_interactions_conserve_stock(DeploymentKind::Async);
}

#[test]
fn deployments_agree() {
    same_results_under_both_deployments(0);
    same_results_under_both_deployments(500);
}

#[test]
fn the_history_window_moves_and_stays_bounded() {
    let mart = SmartMart::new(DeploymentKind::Async, &data(1)).expect("mart");
    let probe = Arc::new(Probe::default());
    let before = mart.history_of(0).expect("history");
    assert_eq!(before.len(), HISTORY as usize);
    let order = Arc::new(Order {
        groups: vec![workload::SectionGroup {
            section: 0,
            items: vec![0],
            quantities: vec![3],
        }],
        window: 5,
        delay_iterations: 0,
    });
    for _ in 0..3 {
        mart.interaction(0, &order, &probe).expect("commits");
    }
    assert_eq!(probe.take_attempts(), 3, "no conflicts alone");
    let after = mart.history_of(0).expect("history");
    assert_eq!(
        after.len(),
        HISTORY as usize,
        "oldest deleted as newest added"
    );
    let seqs: Vec<u64> = after.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (4..=u64::from(HISTORY) + 3).collect::<Vec<_>>());
    assert!(after[after.len() - 3..]
        .iter()
        .all(|(_, p)| p.quantity == 3 && p.customer == 0));
}

#[test]
fn bad_data_configs_are_errors() {
    for bad in [
        DataConfig {
            sections: 0,
            ..data(1)
        },
        DataConfig {
            items_per_section: 0,
            ..data(1)
        },
        DataConfig {
            history_len: 0,
            ..data(1)
        },
        DataConfig {
            carts: 0,
            ..data(1)
        },
    ] {
        assert!(
            SmartMart::new(DeploymentKind::Sync, &bad).is_err(),
            "{bad:?}"
        );
    }
}

fn tiny_config() -> SmartMartBenchConfig {
    SmartMartBenchConfig {
        seconds_per_row: 0.02,
        delay_seconds_per_row: 0.02,
        repetitions: 1,
        items_per_section: ITEMS,
        groups: 2,
        window: 10,
        delay_ms: 0.2,
        fig6_windows: vec![5, 10],
        fig6_order_sizes: vec![8],
        fig9_order_sizes: vec![8],
        fig9_sections: vec![1, 8],
        delay_order_size: 8,
        workers: vec![1, 2],
        workers_order_size: 8,
        workers_items_per_section: ITEMS,
        async_all: true,
        zipf_thetas: vec![0.5, 5.0],
        zipf_order_size: 8,
        load_threads: 2,
        seed: 1,
        idle_seconds: 0.1,
    }
}

#[test]
fn defaults_match_the_issue() {
    let full = SmartMartBenchConfig::full();
    assert!(full.validate().is_ok());
    assert_eq!(full.fig6_windows, vec![10, 50, 150, 300]);
    assert_eq!(full.fig9_order_sizes, vec![8, 32, 64]);
    assert_eq!(full.fig9_sections, vec![1, 2, 4, 8]);
    assert_eq!((full.delay_order_size, full.delay_ms), (8, 3.0));
    assert_eq!(full.workers, vec![1, 2, 4]);
    assert_eq!(full.zipf_thetas, vec![0.01, 0.5, 0.99, 2.0, 5.0]);
    assert_eq!(full.window, 150);
    assert_eq!(full.idle_seconds, 2.0);
    assert_eq!(full.idle_rows(), 2);
    let (order_size, window, data) = full.delay_store();
    assert_eq!((order_size, window), (8, 150));
    assert_eq!((data.sections, data.carts, data.cart_executors), (8, 1, 1));
    assert_eq!(data.items_per_section, full.items_per_section);
    assert_eq!(
        data.history_len, 300,
        "max window over the rows on that store"
    );
    assert_eq!(full.measured_rows(), 24 + 32 + 10 + 9);
    let quick = SmartMartBenchConfig::quick();
    assert!(quick.validate().is_ok());
    assert!(quick.measured_rows() < full.measured_rows());
}

#[test]
fn bad_configs_are_errors() {
    let bad = [
        SmartMartBenchConfig {
            seconds_per_row: 0.0,
            ..tiny_config()
        },
        SmartMartBenchConfig {
            delay_seconds_per_row: f64::NAN,
            ..tiny_config()
        },
        SmartMartBenchConfig {
            repetitions: 0,
            ..tiny_config()
        },
        SmartMartBenchConfig {
            fig9_sections: vec![9],
            ..tiny_config()
        },
        SmartMartBenchConfig {
            fig9_order_sizes: vec![4],
            ..tiny_config()
        },
        SmartMartBenchConfig {
            fig6_windows: vec![0],
            ..tiny_config()
        },
        SmartMartBenchConfig {
            workers: vec![0],
            ..tiny_config()
        },
        SmartMartBenchConfig {
            zipf_thetas: vec![-1.0],
            ..tiny_config()
        },
        SmartMartBenchConfig {
            items_per_section: 4,
            ..tiny_config()
        },
        SmartMartBenchConfig {
            delay_ms: 0.0,
            ..tiny_config()
        },
        SmartMartBenchConfig {
            idle_seconds: -1.0,
            ..tiny_config()
        },
        SmartMartBenchConfig {
            idle_seconds: f64::NAN,
            ..tiny_config()
        },
        SmartMartBenchConfig {
            idle_seconds: MAX_IDLE_SECONDS + 1.0,
            ..tiny_config()
        },
    ];
    for config in bad {
        assert!(config.validate().is_err(), "{config:?}");
    }
    assert!(tiny_config().validate().is_ok());
}

#[test]
fn end_to_end_tiny_run_writes_every_row() {
    let out = std::env::temp_dir().join(format!("roost-smartmart-bench-{}", std::process::id()));
    let config = tiny_config();
    let run = run(&config, &out, "roost bench smartmart --test").expect("bench runs");
    let json = std::fs::read_to_string(&run.files.json).expect("json written");
    let parsed: BenchReport = serde_json::from_str(&json).expect("json parses");
    assert_eq!(
        parsed.rows.len(),
        config.measured_rows() + config.idle_rows()
    );
    let (idle, measured): (Vec<&Row>, Vec<&Row>) = parsed
        .rows
        .iter()
        .partition(|r| r.param_str("figure") == Some(Figure::Idle.name()));
    assert_eq!(idle.len(), 2);
    for row in idle {
        // Other tests share this process, so only plausibility: a real,
        // finite reading of at most every core for the whole window.
        let pct = row.extra["idle_cpu_pct_of_core"].as_f64().expect("pct");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(
            pct.is_finite() && pct >= 0.0 && pct <= 100.0 * cores as f64 + 10.0,
            "{row:?}"
        );
        assert!(row.extra["idle_window_s"].as_f64().unwrap() >= 0.1);
        assert!(row.extra["warmup_interactions"].as_u64().unwrap() >= 4);
        assert_eq!(row.param_u64("sections"), Some(8));
    }
    for row in measured {
        assert!(row.throughput_tps > 0.0, "{row:?}");
        assert!(["sync", "async"].contains(&row.variant.as_str()));
        if row.variant == "async" {
            assert!(row.extra.contains_key("speedup"), "{row:?}");
        }
        assert!(row.extra.contains_key("commit_cost_us"));
    }
    assert_eq!(run.goals.len(), 3);
    assert!(
        run.goals.iter().all(|g| g.pass.is_some()),
        "{:?}",
        run.goals
    );
    let md = std::fs::read_to_string(&run.files.markdown).expect("md written");
    assert!(md.contains("Figure 9"), "{md}");
    assert!(md.contains("idle CPU of an idle node"), "{md}");
    assert!(md.contains("[[containers]]"), "deployments in the notes");
    assert!(run.plot.is_some_and(|p| p.exists()));
    std::fs::remove_dir_all(&out).expect("clean up");
}

#[test]
fn speedup_is_the_median_of_paired_ratios() {
    let rep = |tps: f64| RepResult {
        throughput_tps: tps,
        latency_us: LatencyUs::default(),
        abort_rate: 0.0,
        commits: 0,
        aborts: 0,
        failures: 0,
        elapsed_s: 0.0,
        after_body_p50_us: 0.0,
        after_body_p99_us: 0.0,
        others_cpu: 0.0,
    };
    let sync = [rep(100.0), rep(50.0), rep(100.0)];
    let this = [rep(150.0), rep(100.0), rep(120.0)];
    let row = with_speedup(Row::new("roost", "async"), &sync, &this);
    let speedup = row.extra["speedup"].as_f64().unwrap();
    assert!((speedup - 1.5).abs() < 1e-12, "{speedup}");
    assert_eq!(crate::results::median([1.0, 3.0]), Some(2.0));
    assert_eq!(crate::results::median([f64::NAN]), None);
    let none = with_speedup(Row::new("roost", "async"), &[rep(0.0)], &[rep(1.0)]);
    assert!(!none.extra.contains_key("speedup"));
}

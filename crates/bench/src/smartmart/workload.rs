//! SmartMart's workload generator: orders of N items over store sections
//! (balanced over k fixed or random sections, or Zipfian over all of them),
//! the variable-discount trend computation, and the Delay variant's busy work
//! with its calibration.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rand::seq::index::sample;
use rand::Rng;
use thiserror::Error;

/// Quantities of one item in an order: `1..=MAX_QUANTITY`.
pub const MAX_QUANTITY: u32 = 4;
/// The Manifesto's constant in `mean + C * std_dev`.
pub const TREND_STD_WEIGHT: f64 = 0.1;
const BASIS_POINTS: u64 = 10_000;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum WorkloadError {
    #[error("an order needs 1..={max} items, got {got}")]
    OrderSize { got: usize, max: usize },
    #[error("an order spans 1..={max} store sections, got {got}")]
    Sections { got: usize, max: usize },
    #[error(
        "{items} items over {sections} sections do not fit in {per_section} items per section"
    )]
    ItemsPerSection {
        items: usize,
        sections: usize,
        per_section: u32,
    },
    #[error("the zipf constant must be a positive number, got {0}")]
    Theta(f64),
}

/// How an order's items are spread over the store sections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SectionChoice {
    /// N/k items from each of sections `0..k` (the seed's Figure 9, and
    /// "async-fixed" in Figure 12).
    Fixed { sections: usize },
    /// N/k items from each of k sections drawn at random per order
    /// ("async-all" in Figure 12).
    Random { sections: usize },
    /// Each item's section drawn from a Zipfian over all sections (rank 0,
    /// section 0, most popular), the seed's skew experiment.
    Zipf { theta: f64 },
}

impl SectionChoice {
    pub fn name(&self) -> &'static str {
        match self {
            SectionChoice::Fixed { .. } => "fixed",
            SectionChoice::Random { .. } => "random",
            SectionChoice::Zipf { .. } => "zipf",
        }
    }

    /// Sections one order spans (at most, for Zipf).
    pub fn sections(&self, total: usize) -> usize {
        match self {
            SectionChoice::Fixed { sections } | SectionChoice::Random { sections } => *sections,
            SectionChoice::Zipf { .. } => total,
        }
    }
}

/// One store section's part of an order: distinct items and their quantities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionGroup {
    pub section: u32,
    /// Global item ids: `section * items_per_section + local`.
    pub items: Vec<u32>,
    pub quantities: Vec<u32>,
}

/// What one interaction buys, and how its variable discounts are computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    /// By section, in section order; no section twice, no item twice.
    pub groups: Vec<SectionGroup>,
    /// Purchase-history records scanned per item.
    pub window: u32,
    /// Delay variant: busy-work iterations per item instead of the scan (0:
    /// scan the history).
    pub delay_iterations: u64,
}

impl Order {
    pub fn items(&self) -> usize {
        self.groups.iter().map(|g| g.items.len()).sum()
    }

    pub fn quantity(&self) -> u64 {
        self.groups
            .iter()
            .flat_map(|g| &g.quantities)
            .map(|&q| u64::from(q))
            .sum()
    }
}

/// Zipfian over a handful of sections, by its exact CDF (any theta > 0: the
/// seed goes up to 5.0, beyond YCSB's generator).
#[derive(Debug, Clone, PartialEq)]
pub struct SectionZipf {
    cdf: Vec<f64>,
}

impl SectionZipf {
    pub fn new(sections: usize, theta: f64) -> Result<Self, WorkloadError> {
        if !(theta.is_finite() && theta > 0.0) {
            return Err(WorkloadError::Theta(theta));
        }
        let weights: Vec<f64> = (1..=sections).map(|r| (r as f64).powf(-theta)).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cdf = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Ok(SectionZipf { cdf })
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let u: f64 = rng.random();
        self.cdf
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.cdf.len() - 1)
    }
}

/// Draws orders.
#[derive(Debug, Clone)]
pub struct OrderGenerator {
    order_size: usize,
    total_sections: usize,
    items_per_section: u32,
    choice: SectionChoice,
    zipf: Option<SectionZipf>,
    window: u32,
    delay_iterations: u64,
}

impl OrderGenerator {
    pub fn new(
        order_size: usize,
        choice: SectionChoice,
        total_sections: usize,
        items_per_section: u32,
        window: u32,
        delay_iterations: u64,
    ) -> Result<Self, WorkloadError> {
        if order_size == 0 || order_size > (items_per_section as usize) * total_sections {
            return Err(WorkloadError::OrderSize {
                got: order_size,
                max: items_per_section as usize * total_sections,
            });
        }
        let zipf = match choice {
            SectionChoice::Fixed { sections } | SectionChoice::Random { sections } => {
                if sections == 0 || sections > total_sections || sections > order_size {
                    return Err(WorkloadError::Sections {
                        got: sections,
                        max: total_sections.min(order_size),
                    });
                }
                if order_size.div_ceil(sections) > items_per_section as usize {
                    return Err(WorkloadError::ItemsPerSection {
                        items: order_size,
                        sections,
                        per_section: items_per_section,
                    });
                }
                None
            }
            SectionChoice::Zipf { theta } => {
                if order_size > items_per_section as usize {
                    // All items may land in one section.
                    return Err(WorkloadError::ItemsPerSection {
                        items: order_size,
                        sections: 1,
                        per_section: items_per_section,
                    });
                }
                Some(SectionZipf::new(total_sections, theta)?)
            }
        };
        Ok(OrderGenerator {
            order_size,
            total_sections,
            items_per_section,
            choice,
            zipf,
            window,
            delay_iterations,
        })
    }

    /// Items per section of this order, indexed by section.
    fn counts<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<usize> {
        let mut counts = vec![0usize; self.total_sections];
        match self.choice {
            SectionChoice::Fixed { sections } => spread(&mut counts, 0..sections, self.order_size),
            SectionChoice::Random { sections } => {
                let mut chosen = sample(rng, self.total_sections, sections).into_vec();
                chosen.sort_unstable();
                spread(&mut counts, chosen, self.order_size);
            }
            SectionChoice::Zipf { .. } => {
                let zipf = self.zipf.as_ref().expect("built with the choice");
                for _ in 0..self.order_size {
                    counts[zipf.sample(rng)] += 1;
                }
            }
        }
        counts
    }

    pub fn next<R: Rng + ?Sized>(&self, rng: &mut R) -> Order {
        let groups = self
            .counts(rng)
            .into_iter()
            .enumerate()
            .filter(|&(_, n)| n > 0)
            .map(|(section, n)| {
                let mut local = sample(rng, self.items_per_section as usize, n).into_vec();
                local.sort_unstable();
                let base = section as u32 * self.items_per_section;
                SectionGroup {
                    section: section as u32,
                    items: local.into_iter().map(|l| base + l as u32).collect(),
                    quantities: (0..n).map(|_| rng.random_range(1..=MAX_QUANTITY)).collect(),
                }
            })
            .collect();
        Order {
            groups,
            window: self.window,
            delay_iterations: self.delay_iterations,
        }
    }
}

/// `items` over `sections` as evenly as possible, the first ones taking the
/// remainder.
fn spread(counts: &mut [usize], sections: impl IntoIterator<Item = usize>, items: usize) {
    let sections: Vec<usize> = sections.into_iter().collect();
    let k = sections.len();
    for (i, s) in sections.into_iter().enumerate() {
        counts[s] = items / k + usize::from(i < items % k);
    }
}

/// Mean and (population) standard deviation of recent purchase quantities:
/// the trend the variable discount is computed from.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Trend {
    pub mean: f64,
    pub std_dev: f64,
}

impl Trend {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let (mut n, mut sum, mut sum_sq) = (0usize, 0.0, 0.0);
        for v in values {
            n += 1;
            sum += v;
            sum_sq += v * v;
        }
        if n == 0 {
            return Trend::default();
        }
        let mean = sum / n as f64;
        let variance = (sum_sq / n as f64 - mean * mean).max(0.0);
        Trend {
            mean,
            std_dev: variance.sqrt(),
        }
    }

    /// The demand the trend predicts: `mean + C * std_dev`.
    pub fn expected(&self) -> f64 {
        self.mean + TREND_STD_WEIGHT * self.std_dev
    }
}

/// What one item (or a whole order) costs, in cents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub items: u32,
    pub quantity: u64,
    pub amount_cents: u64,
    pub fixed_disc_cents: u64,
    pub var_disc_cents: u64,
}

impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, other: Totals) {
        self.items += other.items;
        self.quantity += other.quantity;
        self.amount_cents += other.amount_cents;
        self.fixed_disc_cents += other.fixed_disc_cents;
        self.var_disc_cents += other.var_disc_cents;
    }
}

/// Prices one item: amount, the group's fixed discount, and the variable
/// discount `var_disc * quantity / (mean + C * std_dev)` (capped at
/// `var_disc`), both cut so that the price paid never falls below the
/// item's minimum price (the check the case study's code skips).
pub fn price_item(
    price_cents: u64,
    min_price_cents: u64,
    quantity: u32,
    fixed_disc_bp: u32,
    var_disc_bp: u32,
    trend: Trend,
) -> Totals {
    let amount = price_cents * u64::from(quantity);
    let floor = (min_price_cents * u64::from(quantity)).min(amount);
    let fixed = (amount * u64::from(fixed_disc_bp) / BASIS_POINTS).min(amount - floor);
    let cap = f64::from(var_disc_bp) / BASIS_POINTS as f64;
    let expected = trend.expected();
    let factor = if expected > 0.0 {
        (cap * f64::from(quantity) / expected).clamp(0.0, cap)
    } else {
        0.0
    };
    let var = ((amount as f64 * factor).round() as u64).min(amount - floor - fixed);
    Totals {
        items: 1,
        quantity: u64::from(quantity),
        amount_cents: amount,
        fixed_disc_cents: fixed,
        var_disc_cents: var,
    }
}

/// The Delay variant's "complex prediction": `iterations` steps of a
/// xorshift generator, each drawing a quantity in 1..=8, summarized as a
/// trend. Pure CPU work (no sleep), so it takes a core for its whole length.
pub fn busy_trend(iterations: u64, seed: u64) -> Trend {
    let mut x = seed | 1;
    let (mut sum, mut sum_sq) = (0u64, 0u64);
    for _ in 0..iterations {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = (x >> 61) + 1;
        sum += v;
        sum_sq += v * v;
    }
    let (sum, sum_sq) = black_box((sum, sum_sq));
    if iterations == 0 {
        return Trend::default();
    }
    let n = iterations as f64;
    let mean = sum as f64 / n;
    Trend {
        mean,
        std_dev: (sum_sq as f64 / n - mean * mean).max(0.0).sqrt(),
    }
}

/// Iterations of [`busy_trend`] per millisecond on this machine, measured
/// once on one thread before any database runs (the fastest of several
/// rounds, so a busy moment does not inflate the delay). The Delay variant
/// then runs a fixed number of iterations: calibrated by time, but counted in
/// work, so executors sharing a core each still need their full share of CPU.
pub fn calibrate_iterations_per_ms() -> f64 {
    const PROBE_ITERATIONS: u64 = 400_000;
    const ROUNDS: usize = 7;
    let mut best = Duration::MAX;
    for round in 0..ROUNDS {
        let start = Instant::now();
        black_box(busy_trend(PROBE_ITERATIONS, round as u64 + 1));
        best = best.min(start.elapsed());
    }
    let ms = best.as_secs_f64() * 1e3;
    if ms > 0.0 {
        PROBE_ITERATIONS as f64 / ms
    } else {
        PROBE_ITERATIONS as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn generator(size: usize, choice: SectionChoice) -> OrderGenerator {
        OrderGenerator::new(size, choice, 8, 100, 150, 0).expect("valid")
    }

    fn check_order(order: &Order, size: usize) {
        assert_eq!(order.items(), size);
        let mut sections: Vec<u32> = order.groups.iter().map(|g| g.section).collect();
        sections.dedup();
        assert_eq!(sections.len(), order.groups.len(), "no section twice");
        for g in &order.groups {
            assert_eq!(g.items.len(), g.quantities.len());
            let mut items = g.items.clone();
            items.dedup();
            assert_eq!(items.len(), g.items.len(), "no item twice");
            assert!(g.items.iter().all(|&i| i / 100 == g.section));
            assert!(g
                .quantities
                .iter()
                .all(|&q| (1..=MAX_QUANTITY).contains(&q)));
        }
    }

    #[test]
    fn fixed_orders_spread_evenly_over_the_first_sections() {
        let mut rng = SmallRng::seed_from_u64(1);
        for (size, k) in [(8, 1), (8, 8), (32, 4), (64, 8), (10, 4)] {
            let order = generator(size, SectionChoice::Fixed { sections: k }).next(&mut rng);
            check_order(&order, size);
            let sections: Vec<u32> = order.groups.iter().map(|g| g.section).collect();
            assert_eq!(sections, (0..k as u32).collect::<Vec<_>>());
            let counts: Vec<usize> = order.groups.iter().map(|g| g.items.len()).collect();
            assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn random_orders_use_k_distinct_sections() {
        let mut rng = SmallRng::seed_from_u64(2);
        let generator = generator(32, SectionChoice::Random { sections: 2 });
        let mut seen = [false; 8];
        for _ in 0..200 {
            let order = generator.next(&mut rng);
            check_order(&order, 32);
            assert_eq!(order.groups.len(), 2);
            for g in &order.groups {
                seen[g.section as usize] = true;
            }
        }
        assert!(seen.iter().all(|&s| s), "every section gets picked");
    }

    #[test]
    fn zipf_skew_concentrates_on_section_zero() {
        let mut rng = SmallRng::seed_from_u64(3);
        let share_of_section_zero = |theta: f64, rng: &mut SmallRng| {
            let generator = generator(32, SectionChoice::Zipf { theta });
            let mut zero = 0;
            for _ in 0..200 {
                let order = generator.next(rng);
                check_order(&order, 32);
                zero += order
                    .groups
                    .iter()
                    .find(|g| g.section == 0)
                    .map_or(0, |g| g.items.len());
            }
            zero as f64 / (200.0 * 32.0)
        };
        let flat = share_of_section_zero(0.01, &mut rng);
        assert!((flat - 0.125).abs() < 0.03, "{flat}");
        let skewed = share_of_section_zero(0.99, &mut rng);
        assert!(skewed > 0.3 && skewed < 0.45, "{skewed}");
        assert!(share_of_section_zero(5.0, &mut rng) > 0.95);
    }

    #[test]
    fn section_zipf_probabilities() {
        let z = SectionZipf::new(8, 1.0).unwrap();
        let h8: f64 = (1..=8).map(|r| 1.0 / r as f64).sum();
        assert!((z.cdf[0] - 1.0 / h8).abs() < 1e-12);
        assert!((z.cdf[7] - 1.0).abs() < 1e-12);
        assert!(SectionZipf::new(8, 0.0).is_err());
        assert!(SectionZipf::new(8, f64::NAN).is_err());
    }

    #[test]
    fn bad_generators_are_errors() {
        let new = |size, choice| OrderGenerator::new(size, choice, 8, 16, 150, 0);
        assert!(new(0, SectionChoice::Fixed { sections: 1 }).is_err());
        assert!(new(8, SectionChoice::Fixed { sections: 0 }).is_err());
        assert!(new(8, SectionChoice::Fixed { sections: 9 }).is_err());
        assert!(new(4, SectionChoice::Fixed { sections: 8 }).is_err());
        assert!(new(64, SectionChoice::Fixed { sections: 2 }).is_err());
        assert!(new(32, SectionChoice::Zipf { theta: 1.0 }).is_err());
        assert!(new(8, SectionChoice::Zipf { theta: -1.0 }).is_err());
        assert!(new(64, SectionChoice::Fixed { sections: 4 }).is_ok());
    }

    #[test]
    fn trend_is_mean_and_population_std_dev() {
        let t = Trend::of([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!((t.mean - 5.0).abs() < 1e-12);
        assert!((t.std_dev - 2.0).abs() < 1e-12);
        assert_eq!(Trend::of(std::iter::empty()), Trend::default());
    }

    #[test]
    fn prices_respect_caps_and_minimum_price() {
        let trend = Trend {
            mean: 2.0,
            std_dev: 0.0,
        };
        // 1000 cents x 2, 10% fixed, var cap 20% x 2 / 2 = 20%.
        let t = price_item(1000, 100, 2, 1000, 2000, trend);
        assert_eq!(
            (t.amount_cents, t.fixed_disc_cents, t.var_disc_cents),
            (2000, 200, 400)
        );
        // Minimum price 900: at most 100 per unit off in all.
        let t = price_item(1000, 900, 2, 1000, 2000, trend);
        assert_eq!((t.fixed_disc_cents, t.var_disc_cents), (200, 0));
        let t = price_item(1000, 850, 2, 500, 2000, trend);
        assert_eq!((t.fixed_disc_cents, t.var_disc_cents), (100, 200));
        // No history: no variable discount.
        assert_eq!(
            price_item(1000, 0, 1, 0, 2000, Trend::default()).var_disc_cents,
            0
        );
    }

    #[test]
    fn busy_trend_is_uniform_on_one_to_eight() {
        let t = busy_trend(100_000, 7);
        assert!((t.mean - 4.5).abs() < 0.05, "{t:?}");
        assert!((t.std_dev - (63.0f64 / 12.0).sqrt()).abs() < 0.05, "{t:?}");
        assert!(calibrate_iterations_per_ms() > 0.0);
    }
}

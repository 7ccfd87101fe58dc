//! Key generators: uniform, and Zipfian after Gray et al., "Quickly generating
//! billion-record synthetic databases" (SIGMOD 1994), the generator YCSB uses.
//!
//! A Zipfian draw is a *rank*: rank 0 is the most popular item. YCSB's
//! "scrambled" variant hashes the rank (FNV-1a, 64 bit) modulo the item count
//! so the hot items are spread over the key space instead of clustering at its
//! start; [`KeyChooser`] does the same.

use rand::Rng;
use thiserror::Error;

/// YCSB's default skew.
pub const YCSB_THETA: f64 = 0.99;

/// Below this many items the zeta constant is summed exactly; above it the tail
/// is added with the Euler-Maclaurin formula, so building a generator over a
/// billion items takes milliseconds, not seconds.
const EXACT_ZETA_TERMS: u64 = 1 << 20;

const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME_64: u64 = 0x0000_0100_0000_01B3;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum KeyGenError {
    #[error("a key generator needs at least one item")]
    NoItems,
    #[error("Zipfian theta must be in (0, 1), got {0}")]
    BadTheta(f64),
}

/// How keys are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDistribution {
    Uniform,
    /// Scrambled Zipfian with the given skew.
    Zipfian {
        theta: f64,
    },
}

impl KeyDistribution {
    /// YCSB's scrambled Zipfian with theta 0.99.
    pub const YCSB_ZIPFIAN: KeyDistribution = KeyDistribution::Zipfian { theta: YCSB_THETA };

    /// Short name for tables and file names: `uniform`, `zipfian` (theta
    /// 0.99) or `zipfian-<theta>`.
    pub fn name(&self) -> String {
        match self {
            KeyDistribution::Uniform => "uniform".to_owned(),
            KeyDistribution::Zipfian { theta } if *theta == YCSB_THETA => "zipfian".to_owned(),
            KeyDistribution::Zipfian { theta } => format!("zipfian-{theta}"),
        }
    }
}

/// FNV-1a over the eight little-endian bytes of `value` (YCSB's `fnvhash64`).
pub fn fnv1a_64(value: u64) -> u64 {
    value
        .to_le_bytes()
        .iter()
        .fold(FNV_OFFSET_BASIS_64, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME_64)
        })
}

/// `sum_{i=1..=n} i^-theta`.
fn zeta(items: u64, theta: f64) -> f64 {
    let exact_terms = items.min(EXACT_ZETA_TERMS);
    let head: f64 = (1..=exact_terms).map(|i| (i as f64).powf(-theta)).sum();
    if items <= exact_terms {
        return head;
    }
    head + zeta_tail(exact_terms as f64, items as f64, theta)
}

/// `sum_{i=m+1..=n} i^-theta` by Euler-Maclaurin (two correction terms); the
/// error is far below f64 precision of the whole sum for m >= 2^20.
fn zeta_tail(m: f64, n: f64, theta: f64) -> f64 {
    let f = |x: f64| x.powf(-theta);
    let f_prime = |x: f64| -theta * x.powf(-theta - 1.0);
    let integral = (n.powf(1.0 - theta) - m.powf(1.0 - theta)) / (1.0 - theta);
    integral + (f(n) - f(m)) / 2.0 + (f_prime(n) - f_prime(m)) / 12.0
}

/// Zipfian ranks over `0..items`: rank `r` is drawn with probability
/// proportional to `1 / (r + 1)^theta`.
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
    /// `1 + 0.5^theta`: below it (times zeta_n) the draw is rank 1.
    rank1_threshold: f64,
}

impl Zipfian {
    pub fn new(items: u64, theta: f64) -> Result<Self, KeyGenError> {
        if items == 0 {
            return Err(KeyGenError::NoItems);
        }
        if !(theta > 0.0 && theta < 1.0) {
            return Err(KeyGenError::BadTheta(theta));
        }
        let zeta_n = zeta(items, theta);
        let zeta_2 = zeta(2, theta);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
        Ok(Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta_n,
            eta,
            rank1_threshold: 1.0 + 0.5f64.powf(theta),
        })
    }

    pub fn items(&self) -> u64 {
        self.items
    }

    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// Probability of rank 0 (the hottest item).
    pub fn top_probability(&self) -> f64 {
        1.0 / self.zeta_n
    }

    /// The rank for a uniform `unit` in `[0, 1)`.
    pub fn rank_for_unit(&self, unit: f64) -> u64 {
        let scaled = unit * self.zeta_n;
        if scaled < 1.0 {
            return 0;
        }
        if scaled < self.rank1_threshold {
            return 1.min(self.items - 1);
        }
        // Reached only for items >= 3, where eta is finite.
        let rank = self.items as f64 * (self.eta * unit - self.eta + 1.0).powf(self.alpha);
        (rank as u64).min(self.items - 1)
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        self.rank_for_unit(rng.random::<f64>())
    }
}

#[derive(Debug, Clone)]
enum Chooser {
    Uniform,
    ScrambledZipfian(Zipfian),
}

/// Draws item indexes in `0..items` from a [`KeyDistribution`].
#[derive(Debug, Clone)]
pub struct KeyChooser {
    items: u64,
    chooser: Chooser,
}

impl KeyChooser {
    pub fn new(distribution: KeyDistribution, items: u64) -> Result<Self, KeyGenError> {
        if items == 0 {
            return Err(KeyGenError::NoItems);
        }
        let chooser = match distribution {
            KeyDistribution::Uniform => Chooser::Uniform,
            KeyDistribution::Zipfian { theta } => {
                Chooser::ScrambledZipfian(Zipfian::new(items, theta)?)
            }
        };
        Ok(KeyChooser { items, chooser })
    }

    pub fn items(&self) -> u64 {
        self.items
    }

    /// The index that a Zipfian rank lands on (identity for uniform).
    pub fn index_of_rank(&self, rank: u64) -> u64 {
        match self.chooser {
            Chooser::Uniform => rank,
            Chooser::ScrambledZipfian(_) => fnv1a_64(rank) % self.items,
        }
    }

    pub fn next_index<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match &self.chooser {
            Chooser::Uniform => rng.random_range(0..self.items),
            Chooser::ScrambledZipfian(zipf) => fnv1a_64(zipf.sample(rng)) % self.items,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    const DRAWS: usize = 200_000;

    fn rank_counts(zipf: &Zipfian, seed: u64) -> Vec<u64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut counts = vec![0u64; zipf.items() as usize];
        for _ in 0..DRAWS {
            let rank = zipf.sample(&mut rng);
            assert!(rank < zipf.items(), "rank {rank} out of range");
            counts[rank as usize] += 1;
        }
        counts
    }

    #[test]
    fn rank_zero_is_drawn_far_more_often_than_the_last() {
        let zipf = Zipfian::new(1000, YCSB_THETA).expect("valid parameters");
        let counts = rank_counts(&zipf, 7);
        let (first, last) = (counts[0], counts[999]);
        assert!(
            first > 100 * last.max(1),
            "rank 0 drawn {first} times, rank 999 {last} times"
        );
        // About 1/zeta(1000, 0.99) ~ 13% of draws go to rank 0.
        let share = first as f64 / DRAWS as f64;
        let expected = zipf.top_probability();
        assert!(
            (share - expected).abs() < 0.1 * expected,
            "rank 0 share {share}, expected {expected}"
        );
    }

    #[test]
    fn rank_frequencies_decrease() {
        let zipf = Zipfian::new(1000, YCSB_THETA).expect("valid parameters");
        let counts = rank_counts(&zipf, 11);
        assert!(counts[0] > counts[1] && counts[1] > counts[2] && counts[2] > counts[10]);
        let head: u64 = counts[..10].iter().sum();
        let tail: u64 = counts[990..].iter().sum();
        assert!(head > 20 * tail, "head {head}, tail {tail}");
    }

    #[test]
    fn tiny_item_counts_stay_in_range() {
        for items in [1u64, 2, 3] {
            let zipf = Zipfian::new(items, YCSB_THETA).expect("valid parameters");
            for unit in [0.0, 0.3, 0.5, 0.9, 0.999_999] {
                assert!(zipf.rank_for_unit(unit) < items);
            }
        }
    }

    #[test]
    fn scrambled_zipfian_spreads_hot_keys_and_stays_in_range() {
        let items = 1000;
        let chooser = KeyChooser::new(KeyDistribution::YCSB_ZIPFIAN, items).expect("valid");
        let mut rng = SmallRng::seed_from_u64(3);
        let mut counts = vec![0u64; items as usize];
        for _ in 0..DRAWS {
            let index = chooser.next_index(&mut rng);
            assert!(index < items);
            counts[index as usize] += 1;
        }
        let hottest = (0..items)
            .max_by_key(|&i| counts[i as usize])
            .expect("non-empty");
        assert_eq!(hottest, chooser.index_of_rank(0));
        assert_ne!(hottest, 0, "scrambling moves rank 0 away from index 0");
    }

    #[test]
    fn uniform_is_roughly_flat() {
        let chooser = KeyChooser::new(KeyDistribution::Uniform, 10).expect("valid");
        let mut rng = SmallRng::seed_from_u64(5);
        let mut counts = [0u64; 10];
        for _ in 0..DRAWS {
            counts[chooser.next_index(&mut rng) as usize] += 1;
        }
        let expected = DRAWS as u64 / 10;
        for count in counts {
            assert!(count.abs_diff(expected) < expected / 10, "{counts:?}");
        }
    }

    #[test]
    fn zeta_tail_approximation_matches_the_exact_sum() {
        let items = EXACT_ZETA_TERMS * 2 + 12_345;
        let exact: f64 = (1..=items).map(|i| (i as f64).powf(-YCSB_THETA)).sum();
        let fast = zeta(items, YCSB_THETA);
        assert!(((fast - exact) / exact).abs() < 1e-9, "{fast} vs {exact}");
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert_eq!(Zipfian::new(0, 0.5).unwrap_err(), KeyGenError::NoItems);
        assert!(matches!(
            Zipfian::new(10, 1.0),
            Err(KeyGenError::BadTheta(_))
        ));
        assert!(matches!(
            Zipfian::new(10, f64::NAN),
            Err(KeyGenError::BadTheta(_))
        ));
        assert!(KeyChooser::new(KeyDistribution::Uniform, 0).is_err());
    }

    #[test]
    fn fnv_matches_reference_values() {
        // FNV-1a of eight zero bytes, and of 1 as little-endian bytes.
        assert_eq!(fnv1a_64(0), 0xA8C7_F832_281A_39C5);
        assert_ne!(fnv1a_64(1), fnv1a_64(0));
    }
}

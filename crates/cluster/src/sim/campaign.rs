//! Campaigns: many seeds of one protocol's simulation within a budget (a seed
//! range and optionally wall-clock time), stopping at the first violation, so
//! CI runs a bounded slice and the full campaign is the same call with a
//! larger range. [`Scenario`] is what a protocol provides to be run by seed
//! (and by `roost sim --protocol NAME`).

use std::ops::Range;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::core::{Checker, Factory, SimConfig, SimConfigError, SimReport, Simulation, Workload};
use crate::protocol::Protocol;

/// One seed's outcome, with its readable trace when asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct SimRun {
    pub report: SimReport,
    pub trace: Vec<String>,
}

/// A protocol's simulation: its factory, workload and checkers, built fresh
/// for every seed. Object safe, so a command line picks one by name.
pub trait Scenario {
    /// The name `roost sim --protocol` knows it by.
    fn protocol(&self) -> &'static str;

    /// Checks the protocol's own settings (the core's are [`SimConfig::validate`]).
    fn validate(&self) -> Result<(), SimConfigError> {
        Ok(())
    }

    /// Runs `seed` (the same seed and settings always give the same report).
    fn run(&self, config: &SimConfig, seed: u64, trace: bool) -> Result<SimRun, SimConfigError>;
}

/// Runs a built simulation to its end: the body of most [`Scenario::run`]s.
pub fn run_simulation<P, F, W, C>(mut sim: Simulation<P, F, W, C>, trace: bool) -> SimRun
where
    P: Protocol,
    F: Factory<P>,
    W: Workload<P>,
    C: Checker<P, W::History>,
{
    if trace {
        sim = sim.with_trace();
    }
    let report = sim.run_in_place().clone();
    SimRun {
        report,
        trace: sim.trace_lines().to_vec(),
    }
}

/// Which seeds, and for how long at most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CampaignSpec {
    pub seeds: Range<u64>,
    /// Stop after the seed during which this much wall time has passed.
    pub max_wall: Option<Duration>,
}

impl CampaignSpec {
    /// `count` seeds from `first`.
    pub fn seeds(first: u64, count: u64) -> Self {
        CampaignSpec {
            seeds: first..first.saturating_add(count),
            max_wall: None,
        }
    }

    /// Seeds from `first` for `wall` of wall-clock time.
    pub fn timed(first: u64, wall: Duration) -> Self {
        CampaignSpec {
            seeds: first..u64::MAX,
            max_wall: Some(wall),
        }
    }
}

#[derive(Debug, PartialEq, Error)]
pub enum CampaignError {
    #[error("the seed range {0}..{1} is empty")]
    EmptyRange(u64, u64),
    #[error(transparent)]
    Config(#[from] SimConfigError),
}

/// Why a campaign stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CampaignStop {
    /// Every seed of the range ran.
    Exhausted,
    /// The wall-clock budget ran out.
    OutOfTime,
    /// A seed broke a property: [`CampaignReport::first_failure`].
    Violation,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CampaignReport {
    pub first_seed: u64,
    pub seeds_run: u64,
    pub stop: CampaignStop,
    pub first_failure: Option<SimReport>,
    pub events: u64,
    pub ops_completed: u64,
    pub ops_unknown: u64,
    pub crashes: u64,
    pub partitions: u64,
    pub max_epoch: u64,
    pub wall_ms: u64,
}

impl CampaignReport {
    /// Where a campaign that continues this one starts.
    pub fn next_seed(&self) -> u64 {
        self.first_seed + self.seeds_run
    }
}

/// Runs `one` on the seeds of `spec` in order until a report has a
/// violation, the range is done, or the wall budget is spent (checked after
/// each seed, so at least one runs).
pub fn run_campaign(
    spec: &CampaignSpec,
    mut one: impl FnMut(u64) -> SimReport,
) -> Result<CampaignReport, CampaignError> {
    if spec.seeds.is_empty() {
        return Err(CampaignError::EmptyRange(spec.seeds.start, spec.seeds.end));
    }
    let started = Instant::now();
    let mut result = CampaignReport {
        first_seed: spec.seeds.start,
        seeds_run: 0,
        stop: CampaignStop::Exhausted,
        first_failure: None,
        events: 0,
        ops_completed: 0,
        ops_unknown: 0,
        crashes: 0,
        partitions: 0,
        max_epoch: 0,
        wall_ms: 0,
    };
    for seed in spec.seeds.clone() {
        let report = one(seed);
        assert_eq!(report.seed, seed, "a report is of the seed it was run with");
        result.seeds_run += 1;
        result.events += report.events;
        result.ops_completed += report.ops_completed;
        result.ops_unknown += report.ops_unknown;
        result.crashes += report.crashes;
        result.partitions += report.partitions;
        result.max_epoch = result.max_epoch.max(report.max_epoch);
        if report.violation.is_some() {
            result.first_failure = Some(report);
            result.stop = CampaignStop::Violation;
            break;
        }
        if spec.max_wall.is_some_and(|max| started.elapsed() >= max) {
            result.stop = CampaignStop::OutOfTime;
            break;
        }
    }
    result.wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(result)
}

/// A campaign of `scenario` (settings checked once, up front).
pub fn campaign(
    scenario: &dyn Scenario,
    config: &SimConfig,
    spec: &CampaignSpec,
) -> Result<CampaignReport, CampaignError> {
    config.validate()?;
    scenario.validate()?;
    run_campaign(spec, |seed| {
        scenario
            .run(config, seed, false)
            .expect("settings validated before the first seed")
            .report
    })
}

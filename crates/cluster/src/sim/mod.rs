//! Deterministic simulation of any [`Protocol`](crate::protocol::Protocol):
//! our own driver for the sans-IO nodes with a seeded RNG, a virtual clock,
//! and a network that loses, duplicates, delays (and so reorders) messages,
//! partitions nodes, and crashes and restarts them. Everything random comes
//! from one seeded RNG and everything ordered from `BTreeMap`s and a
//! sequence-numbered event queue, so one seed gives one trace (its hash is
//! reported and tested).
//!
//! * [`core`]: the simulator, generic over the protocol, its [`Factory`],
//!   [`Workload`] and [`Checker`].
//! * [`check`]: the membership's checkers (view agreement, lease safety),
//!   which every protocol's simulation includes, and a liveness one for
//!   runs that end in calm (every node serves at the end).
//! * [`campaign`]: seeds within a budget, stopping at the first violation;
//!   [`Scenario`], what a protocol provides to be run by name.
//! * [`register`]: the ABD register's workload and linearizability checker.
//!
//! Adding a protocol: a [`Factory`] (often a closure-like struct around its
//! config), a [`Workload`] recording the history its checker needs, a
//! [`Checker`] (a tuple with [`check::membership_checkers`]), and a
//! [`Scenario`] tying them together; `roost sim --protocol` then needs one
//! match arm.

pub mod campaign;
pub mod check;
pub mod core;
pub mod register;

pub use campaign::{
    campaign, run_campaign, run_simulation, CampaignError, CampaignReport, CampaignSpec,
    CampaignStop, Scenario, SimRun,
};
pub use check::{membership_checkers, LeaseSafety, MembershipCheckers, ServesAtEnd, ViewAgreement};
pub use core::{
    Cause, Checker, ClientId, Factory, SimConfig, SimConfigError, SimNode, SimReport, SimRng,
    Simulation, TraceHash, Violation, Workload, WorkloadStats, World, MAX_CLIENTS_PER_NODE,
    MAX_EVENTS, MAX_QUEUED, MAX_SIM_NODES,
};
pub use register::{check_register, OpRecord, RegisterScenario, RegisterViolation};

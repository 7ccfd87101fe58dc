//! Fault injection in the transport, switchable at runtime (tests, operators
//! rehearsing failures): drop, delay and duplicate outgoing messages, and cut
//! this node off from chosen peers in both directions.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::frame::NodeId;

/// The longest delay chaos may add to one message (a bound on parked tasks' lifetime).
pub const MAX_CHAOS_DELAY_MS: u64 = 60_000;

/// What the chaos layer does now. The default does nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChaosSettings {
    /// Probability in [0, 1] that an outgoing message is dropped.
    pub drop_probability: f64,
    /// Probability in [0, 1] that an outgoing message is sent twice.
    pub duplicate_probability: f64,
    /// Extra delay for every outgoing message (delayed messages may overtake
    /// each other, which reorders them).
    pub delay_ms: u64,
    /// Peers this node neither sends to nor accepts messages from.
    pub partitioned: BTreeSet<NodeId>,
}

#[derive(Debug, Error, PartialEq)]
pub enum ChaosError {
    #[error("{name} = {value} is not a probability in [0, 1]")]
    BadProbability { name: &'static str, value: f64 },
    #[error("delay_ms = {0} exceeds the limit of {MAX_CHAOS_DELAY_MS}")]
    DelayTooLong(u64),
}

impl ChaosSettings {
    pub fn validate(&self) -> Result<(), ChaosError> {
        for (name, value) in [
            ("drop_probability", self.drop_probability),
            ("duplicate_probability", self.duplicate_probability),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ChaosError::BadProbability { name, value });
            }
        }
        if self.delay_ms > MAX_CHAOS_DELAY_MS {
            return Err(ChaosError::DelayTooLong(self.delay_ms));
        }
        Ok(())
    }

    fn is_noop(&self) -> bool {
        *self == ChaosSettings::default()
    }
}

/// The fate chaos chose for one outgoing message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Drop,
    /// Send `copies` (1 or 2) copies after `delay_ms`.
    Send {
        copies: u8,
        delay_ms: u64,
    },
}

impl Verdict {
    pub const PASS: Verdict = Verdict::Send {
        copies: 1,
        delay_ms: 0,
    };
}

/// The shared, runtime-switchable chaos state of one transport.
#[derive(Debug)]
pub struct Chaos {
    /// Fast path: when false every message passes without taking the lock.
    active: AtomicBool,
    state: Mutex<(ChaosSettings, SmallRng)>,
}

impl Chaos {
    pub fn new(seed: u64) -> Self {
        Chaos {
            active: AtomicBool::new(false),
            state: Mutex::new((ChaosSettings::default(), SmallRng::seed_from_u64(seed))),
        }
    }

    pub fn set(&self, settings: ChaosSettings) -> Result<(), ChaosError> {
        settings.validate()?;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.active.store(!settings.is_noop(), Ordering::Release);
        state.0 = settings;
        Ok(())
    }

    pub fn get(&self) -> ChaosSettings {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    pub fn is_partitioned(&self, peer: NodeId) -> bool {
        if !self.active.load(Ordering::Acquire) {
            return false;
        }
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0.partitioned.contains(&peer)
    }

    /// Decides the fate of one message to `to`.
    pub fn outgoing(&self, to: NodeId) -> Verdict {
        if !self.active.load(Ordering::Acquire) {
            return Verdict::PASS;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (settings, rng) = &mut *state;
        if settings.partitioned.contains(&to) {
            return Verdict::Drop;
        }
        if settings.drop_probability > 0.0 && rng.random_bool(settings.drop_probability) {
            return Verdict::Drop;
        }
        let duplicate =
            settings.duplicate_probability > 0.0 && rng.random_bool(settings.duplicate_probability);
        Verdict::Send {
            copies: if duplicate { 2 } else { 1 },
            delay_ms: settings.delay_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_and_verdicts() {
        let chaos = Chaos::new(1);
        assert_eq!(chaos.outgoing(NodeId(2)), Verdict::PASS);
        let bad = ChaosSettings {
            drop_probability: 1.5,
            ..ChaosSettings::default()
        };
        assert!(chaos.set(bad).is_err());
        let cut = ChaosSettings {
            partitioned: [NodeId(2)].into(),
            ..ChaosSettings::default()
        };
        chaos.set(cut).unwrap();
        assert_eq!(chaos.outgoing(NodeId(2)), Verdict::Drop);
        assert_eq!(chaos.outgoing(NodeId(3)), Verdict::PASS);
        assert!(chaos.is_partitioned(NodeId(2)));
        let all = ChaosSettings {
            drop_probability: 1.0,
            ..ChaosSettings::default()
        };
        chaos.set(all).unwrap();
        assert_eq!(chaos.outgoing(NodeId(3)), Verdict::Drop);
        chaos.set(ChaosSettings::default()).unwrap();
        assert!(!chaos.is_partitioned(NodeId(2)));
    }
}

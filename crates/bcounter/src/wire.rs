//! Serialization (serde) of states, deltas and requests, versioned.
//!
//! Every serialized type is a struct whose first field is `version`. Decoding
//! checks the version before anything else, then the shape (lengths, replica
//! ids in range, at most [`MAX_REPLICAS`](crate::MAX_REPLICAS) replicas) and
//! the one invariant a real replica's state always has (it has not spent more
//! rights than it received), so a malformed input is a [`DecodeError`], never
//! a panic later. Body fields are optional on the wire (`serde(default)`),
//! so that a future version that adds or drops fields is still reported as an
//! unsupported version rather than as a missing field.
//!
//! Decoding trusts the sender to be a correct replica (the paper's crash-fault
//! model): it cannot tell a well-formed lie (say, an inflated `R[k][k]`) from
//! the truth.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::compact::CompactRights;
use crate::counter::{Bound, BoundedCounter, CounterMessage};
use crate::error::DecodeError;
use crate::full::FullRights;
use crate::replica::ReplicaId;
use crate::request::{RequestMode, TransferRequest};
use crate::rights::{RightsDelta, RightsState};
use crate::two_sided::{TwoSidedCounter, TwoSidedMessage};

/// The version this build writes and reads, for every serialized type.
pub const WIRE_VERSION: u32 = 1;

fn check_version(what: &'static str, found: u32) -> Result<(), DecodeError> {
    if found != WIRE_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            what,
            found,
            supported: WIRE_VERSION,
        });
    }
    Ok(())
}

fn malformed(what: &'static str, reason: impl Into<String>) -> DecodeError {
    DecodeError::Malformed {
        what,
        reason: reason.into(),
    }
}

fn required<T>(
    what: &'static str,
    field: &'static str,
    value: Option<T>,
) -> Result<T, DecodeError> {
    value.ok_or_else(|| malformed(what, format!("missing field `{field}`")))
}

fn replica_count_of(what: &'static str, replica_count: u32) -> Result<usize, DecodeError> {
    usize::try_from(replica_count).map_err(|_| malformed(what, "replica count overflows usize"))
}

// ---- FullRights -------------------------------------------------------------

#[derive(Serialize)]
struct FullRightsOut<'a> {
    version: u32,
    me: ReplicaId,
    replica_count: u32,
    r: &'a [u64],
    u: &'a [u64],
}

#[derive(Deserialize)]
#[serde(default)]
#[derive(Default)]
struct FullRightsIn {
    version: u32,
    me: Option<ReplicaId>,
    replica_count: Option<u32>,
    r: Option<Vec<u64>>,
    u: Option<Vec<u64>>,
}

const FULL: &str = "full rights state";

impl Serialize for FullRights {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        FullRightsOut {
            version: WIRE_VERSION,
            me: self.me(),
            replica_count: u32::try_from(self.replica_count())
                .expect("replica_count <= MAX_REPLICAS"),
            r: self.r_matrix(),
            u: self.u_vector(),
        }
        .serialize(serializer)
    }
}

impl FullRightsIn {
    fn decode(self) -> Result<FullRights, DecodeError> {
        check_version(FULL, self.version)?;
        let me = required(FULL, "me", self.me)?;
        let replica_count =
            replica_count_of(FULL, required(FULL, "replica_count", self.replica_count)?)?;
        let r = required(FULL, "r", self.r)?;
        let u = required(FULL, "u", self.u)?;
        FullRights::from_parts(me, replica_count, r, u).map_err(|reason| malformed(FULL, reason))
    }
}

impl<'de> Deserialize<'de> for FullRights {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        FullRightsIn::deserialize(deserializer)?
            .decode()
            .map_err(D::Error::custom)
    }
}

// ---- CompactRights ----------------------------------------------------------

#[derive(Serialize)]
struct CompactRightsOut<'a> {
    version: u32,
    me: ReplicaId,
    row: &'a [u64],
    column: &'a [u64],
    diagonal: &'a [u64],
    u: &'a [u64],
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CompactRightsIn {
    version: u32,
    me: Option<ReplicaId>,
    row: Option<Vec<u64>>,
    column: Option<Vec<u64>>,
    diagonal: Option<Vec<u64>>,
    u: Option<Vec<u64>>,
}

const COMPACT: &str = "compact rights state";

impl Serialize for CompactRights {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        CompactRightsOut {
            version: WIRE_VERSION,
            me: self.me(),
            row: self.row(),
            column: self.column(),
            diagonal: self.diagonal(),
            u: self.u_vector(),
        }
        .serialize(serializer)
    }
}

impl CompactRightsIn {
    fn decode(self) -> Result<CompactRights, DecodeError> {
        check_version(COMPACT, self.version)?;
        CompactRights::from_parts(
            required(COMPACT, "me", self.me)?,
            required(COMPACT, "row", self.row)?,
            required(COMPACT, "column", self.column)?,
            required(COMPACT, "diagonal", self.diagonal)?,
            required(COMPACT, "u", self.u)?,
        )
        .map_err(|reason| malformed(COMPACT, reason))
    }
}

impl<'de> Deserialize<'de> for CompactRights {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        CompactRightsIn::deserialize(deserializer)?
            .decode()
            .map_err(D::Error::custom)
    }
}

// ---- RightsDelta ------------------------------------------------------------

#[derive(Serialize)]
struct DeltaOut<'a> {
    version: u32,
    from: ReplicaId,
    to: ReplicaId,
    diagonal: &'a [u64],
    u: &'a [u64],
    transferred_from_to: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DeltaIn {
    version: u32,
    from: Option<ReplicaId>,
    to: Option<ReplicaId>,
    diagonal: Option<Vec<u64>>,
    u: Option<Vec<u64>>,
    transferred_from_to: Option<u64>,
}

const DELTA: &str = "rights delta";

impl Serialize for RightsDelta {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        DeltaOut {
            version: WIRE_VERSION,
            from: self.from,
            to: self.to,
            diagonal: &self.diagonal,
            u: &self.u,
            transferred_from_to: self.transferred_from_to,
        }
        .serialize(serializer)
    }
}

impl DeltaIn {
    fn decode(self) -> Result<RightsDelta, DecodeError> {
        check_version(DELTA, self.version)?;
        let delta = RightsDelta {
            from: required(DELTA, "from", self.from)?,
            to: required(DELTA, "to", self.to)?,
            diagonal: required(DELTA, "diagonal", self.diagonal)?,
            u: required(DELTA, "u", self.u)?,
            transferred_from_to: required(DELTA, "transferred_from_to", self.transferred_from_to)?,
        };
        delta
            .validate()
            .map_err(|error| malformed(DELTA, error.to_string()))?;
        Ok(delta)
    }
}

impl<'de> Deserialize<'de> for RightsDelta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        DeltaIn::deserialize(deserializer)?
            .decode()
            .map_err(D::Error::custom)
    }
}

// ---- BoundedCounter and CounterMessage --------------------------------------

#[derive(Serialize)]
struct CounterOut<'a, T> {
    version: u32,
    bound: Bound,
    k: i64,
    rights: &'a T,
}

#[derive(Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
struct CounterIn<T> {
    #[serde(default)]
    version: u32,
    #[serde(default)]
    bound: Option<Bound>,
    #[serde(default)]
    k: Option<i64>,
    #[serde(default = "none")]
    rights: Option<T>,
}

fn none<T>() -> Option<T> {
    None
}

impl<T> CounterIn<T> {
    fn decode(self, what: &'static str) -> Result<(Bound, i64, T), DecodeError> {
        check_version(what, self.version)?;
        Ok((
            required(what, "bound", self.bound)?,
            required(what, "k", self.k)?,
            required(what, "rights", self.rights)?,
        ))
    }
}

const COUNTER: &str = "bounded counter state";
const MESSAGE: &str = "bounded counter message";

impl<S: RightsState + Serialize> Serialize for BoundedCounter<S> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        CounterOut {
            version: WIRE_VERSION,
            bound: self.bound(),
            k: self.k(),
            rights: self.rights(),
        }
        .serialize(serializer)
    }
}

impl<'de, S: RightsState + Deserialize<'de>> Deserialize<'de> for BoundedCounter<S> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (bound, k, rights) = CounterIn::<S>::deserialize(deserializer)?
            .decode(COUNTER)
            .map_err(D::Error::custom)?;
        Ok(BoundedCounter::from_parts(bound, k, rights))
    }
}

impl<M: Serialize> Serialize for CounterMessage<M> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        CounterOut {
            version: WIRE_VERSION,
            bound: self.bound,
            k: self.k,
            rights: &self.rights,
        }
        .serialize(serializer)
    }
}

impl<'de, M: Deserialize<'de>> Deserialize<'de> for CounterMessage<M> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (bound, k, rights) = CounterIn::<M>::deserialize(deserializer)?
            .decode(MESSAGE)
            .map_err(D::Error::custom)?;
        Ok(CounterMessage { bound, k, rights })
    }
}

// ---- TwoSidedCounter and TwoSidedMessage ------------------------------------

#[derive(Serialize)]
struct HalvesOut<'a, T> {
    version: u32,
    lower_half: &'a T,
    upper_half: &'a T,
}

#[derive(Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
struct HalvesIn<T> {
    #[serde(default)]
    version: u32,
    #[serde(default = "none")]
    lower_half: Option<T>,
    #[serde(default = "none")]
    upper_half: Option<T>,
}

impl<T> HalvesIn<T> {
    fn decode(self, what: &'static str) -> Result<(T, T), DecodeError> {
        check_version(what, self.version)?;
        Ok((
            required(what, "lower_half", self.lower_half)?,
            required(what, "upper_half", self.upper_half)?,
        ))
    }
}

const TWO_SIDED: &str = "two-sided counter state";
const TWO_SIDED_MESSAGE: &str = "two-sided counter message";

impl<S: RightsState + Serialize> Serialize for TwoSidedCounter<S> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        HalvesOut {
            version: WIRE_VERSION,
            lower_half: self.lower_half(),
            upper_half: self.upper_half(),
        }
        .serialize(serializer)
    }
}

impl<'de, S: RightsState + Deserialize<'de>> Deserialize<'de> for TwoSidedCounter<S> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (lower_half, upper_half) = HalvesIn::<BoundedCounter<S>>::deserialize(deserializer)?
            .decode(TWO_SIDED)
            .map_err(D::Error::custom)?;
        TwoSidedCounter::from_halves(lower_half, upper_half)
            .map_err(|reason| D::Error::custom(malformed(TWO_SIDED, reason)))
    }
}

impl<M: Serialize> Serialize for TwoSidedMessage<M> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        HalvesOut {
            version: WIRE_VERSION,
            lower_half: &self.lower_half,
            upper_half: &self.upper_half,
        }
        .serialize(serializer)
    }
}

impl<'de, M: Deserialize<'de>> Deserialize<'de> for TwoSidedMessage<M> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (lower_half, upper_half) = HalvesIn::<CounterMessage<M>>::deserialize(deserializer)?
            .decode(TWO_SIDED_MESSAGE)
            .map_err(D::Error::custom)?;
        Ok(TwoSidedMessage {
            lower_half,
            upper_half,
        })
    }
}

// ---- TransferRequest --------------------------------------------------------

#[derive(Serialize)]
struct RequestOut {
    version: u32,
    requester: ReplicaId,
    donor: ReplicaId,
    amount: u64,
    seen_transferred: u64,
    mode: RequestMode,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RequestIn {
    version: u32,
    requester: Option<ReplicaId>,
    donor: Option<ReplicaId>,
    amount: Option<u64>,
    seen_transferred: Option<u64>,
    mode: Option<RequestMode>,
}

const REQUEST: &str = "transfer request";

impl Serialize for TransferRequest {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        RequestOut {
            version: WIRE_VERSION,
            requester: self.requester,
            donor: self.donor,
            amount: self.amount,
            seen_transferred: self.seen_transferred,
            mode: self.mode,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TransferRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = RequestIn::deserialize(deserializer)?;
        let decode = || -> Result<TransferRequest, DecodeError> {
            check_version(REQUEST, wire.version)?;
            Ok(TransferRequest {
                requester: required(REQUEST, "requester", wire.requester)?,
                donor: required(REQUEST, "donor", wire.donor)?,
                amount: required(REQUEST, "amount", wire.amount)?,
                seen_transferred: required(REQUEST, "seen_transferred", wire.seen_transferred)?,
                mode: required(REQUEST, "mode", wire.mode)?,
            })
        };
        decode().map_err(D::Error::custom)
    }
}

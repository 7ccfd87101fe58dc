//! Serialization: every state, delta and request round-trips through serde
//! (JSON here), carries a version, and bad input is an error, never a panic.

use proptest::prelude::*;
use roost_bcounter::{
    Bound, BoundedCounter, CompactRights, CounterMessage, FullRights, ReplicaId, RequestMode,
    RightsDelta, RightsState, TransferRequest, TwoSidedCounter, TwoSidedMessage, WIRE_VERSION,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

const R0: ReplicaId = ReplicaId(0);
const R1: ReplicaId = ReplicaId(1);

fn roundtrip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
    let text = serde_json::to_string(value).unwrap();
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, value, "{text}");
}

/// Two replicas that have done a bit of everything.
fn busy<S: RightsState>() -> (BoundedCounter<S>, BoundedCounter<S>) {
    let create =
        |me| BoundedCounter::<S>::with_initial_value(Bound::Lower, -5, 20, R0, me, 3).unwrap();
    let (mut r0, mut r1) = (create(R0), create(R1));
    r0.transfer(7, R1).unwrap();
    r0.decrement(3).unwrap();
    r1.merge(&r0.message_for(R1).unwrap()).unwrap();
    r1.increment(2).unwrap();
    r1.decrement(4).unwrap();
    r0.merge(&r1.message_for(R0).unwrap()).unwrap();
    (r0, r1)
}

#[test]
fn everything_roundtrips() {
    let (full0, full1) = busy::<FullRights>();
    roundtrip(&full0);
    roundtrip(&full1);
    roundtrip(full0.rights());
    roundtrip(&full0.message_for(R1).unwrap());
    roundtrip(&full0.rights().delta_for(R1).unwrap());

    let (compact0, _) = busy::<CompactRights>();
    roundtrip(&compact0);
    roundtrip(compact0.rights());
    roundtrip(&compact0.message_for(R1).unwrap());

    let mut two = TwoSidedCounter::<CompactRights>::new(-10, 10, 3, R0, R0, 2).unwrap();
    two.decrement(5).unwrap();
    two.transfer(Bound::Upper, 4, R1).unwrap();
    roundtrip(&two);
    roundtrip(&two.message_for(R1).unwrap());
    let two_full = TwoSidedCounter::<FullRights>::new(-10, 10, 3, R0, R1, 2).unwrap();
    roundtrip(&two_full);

    roundtrip(&TransferRequest {
        requester: R1,
        donor: R0,
        amount: 9,
        seen_transferred: 7,
        mode: RequestMode::Sync,
    });
}

#[test]
fn a_decoded_replica_carries_on() {
    let (r0, mut r1) = busy::<CompactRights>();
    let text = serde_json::to_string(&r0).unwrap();
    let mut restored: BoundedCounter<CompactRights> = serde_json::from_str(&text).unwrap();
    assert_eq!(restored.value().unwrap(), r0.value().unwrap());
    assert_eq!(restored.local_rights().unwrap(), r0.local_rights().unwrap());
    restored.decrement(1).unwrap();
    let delta: CounterMessage<RightsDelta> =
        serde_json::from_str(&serde_json::to_string(&restored.message_for(R1).unwrap()).unwrap())
            .unwrap();
    r1.merge(&delta).unwrap();
    assert_eq!(r1.value().unwrap(), r0.value().unwrap() - 1);
}

#[test]
fn states_and_deltas_carry_the_version() {
    let (r0, _) = busy::<FullRights>();
    let value = serde_json::to_value(&r0).unwrap();
    assert_eq!(value["version"], json!(WIRE_VERSION));
    assert_eq!(value["rights"]["version"], json!(WIRE_VERSION));
    let delta = serde_json::to_value(r0.rights().delta_for(R1).unwrap()).unwrap();
    assert_eq!(delta["version"], json!(WIRE_VERSION));
}

fn decode_error<T: DeserializeOwned + std::fmt::Debug>(value: Value) -> String {
    serde_json::from_value::<T>(value)
        .expect_err("must not decode")
        .to_string()
}

#[test]
fn unknown_version_is_a_clear_error() {
    let (r0, _) = busy::<FullRights>();
    let mut state = serde_json::to_value(&r0).unwrap();
    state["version"] = json!(2);
    let error = decode_error::<BoundedCounter<FullRights>>(state.clone());
    assert!(
        error.contains("unsupported bounded counter state version 2")
            && error.contains("reads version 1"),
        "{error}"
    );
    // A future version that renamed its fields still says "version".
    let future = json!({ "version": 7, "bounds": [0, 10], "matrix": {} });
    let error = decode_error::<BoundedCounter<FullRights>>(future);
    assert!(
        error.contains("unsupported") && error.contains("version 7"),
        "{error}"
    );
    // Nested: the rights part's own version.
    state["version"] = json!(1);
    state["rights"]["version"] = json!(3);
    let error = decode_error::<BoundedCounter<FullRights>>(state);
    assert!(error.contains("full rights state version 3"), "{error}");
    // No version at all reads as version 0.
    let mut delta = serde_json::to_value(r0.rights().delta_for(R1).unwrap()).unwrap();
    delta.as_object_mut().unwrap().remove("version");
    let error = decode_error::<RightsDelta>(delta);
    assert!(error.contains("rights delta version 0"), "{error}");
    let error = decode_error::<TransferRequest>(json!({ "version": 9 }));
    assert!(error.contains("transfer request version 9"), "{error}");
}

#[test]
fn malformed_states_are_errors() {
    let (r0, _) = busy::<FullRights>();
    let good = serde_json::to_value(r0.rights()).unwrap();
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut value = good.clone();
        edit(&mut value);
        decode_error::<FullRights>(value)
    };
    assert!(broken(&|v| v["me"] = json!(3)).contains("replica"));
    assert!(broken(&|v| v["replica_count"] = json!(0)).contains("replica"));
    assert!(broken(&|v| v["replica_count"] = json!(100_000)).contains("replica"));
    assert!(
        broken(&|v| v["r"].as_array_mut().unwrap().pop().map(drop).unwrap()).contains("R must")
    );
    assert!(broken(&|v| v["u"] = json!([1])).contains("U replica_count"));
    assert!(broken(&|v| v["u"][0] = json!(1_000)).contains("spent more"));
    assert!(broken(&|v| v["r"][1] = json!(1_000)).contains("spent more"));
    assert!(broken(&|v| v["r"][0] = json!(-1)).contains("invalid value"));
    assert!(broken(&|v| v["r"] = json!("lots")).contains("invalid type"));
    assert!(broken(&|v| {
        v.as_object_mut().unwrap().remove("u");
    })
    .contains("missing field `u`"));

    let (c0, _) = busy::<CompactRights>();
    let good = serde_json::to_value(c0.rights()).unwrap();
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut value = good.clone();
        edit(&mut value);
        decode_error::<CompactRights>(value)
    };
    assert!(broken(&|v| v["row"] = json!([0])).contains("same length"));
    assert!(broken(&|v| v["row"][0] = json!(5)).contains("diagonal"));
    assert!(broken(&|v| v["row"][1] = json!(1_000)).contains("spent more"));
    assert!(broken(&|v| v["me"] = json!(7)).contains("replica"));

    let delta = serde_json::to_value(c0.rights().delta_for(R1).unwrap()).unwrap();
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut value = delta.clone();
        edit(&mut value);
        decode_error::<RightsDelta>(value)
    };
    assert!(broken(&|v| v["to"] = json!(0)).contains("its own delta"));
    assert!(broken(&|v| v["to"] = json!(9)).contains("not among"));
    assert!(broken(&|v| v["u"] = json!([])).contains("same, non-zero length"));
    assert!(broken(&|v| v["diagonal"] = json!(vec![0; 2000])).contains("limit"));

    let two = TwoSidedCounter::<FullRights>::new(0, 10, 5, R0, R0, 2).unwrap();
    let mut value = serde_json::to_value(&two).unwrap();
    value["upper_half"]["bound"] = json!("lower");
    assert!(decode_error::<TwoSidedCounter<FullRights>>(value).contains("halves"));
    let mut value = serde_json::to_value(&two).unwrap();
    value["lower_half"]["k"] = json!(11);
    assert!(decode_error::<TwoSidedCounter<FullRights>>(value).contains("lower bound above"));

    assert!(serde_json::from_str::<BoundedCounter<FullRights>>("{").is_err());
    assert!(serde_json::from_str::<BoundedCounter<FullRights>>("[]").is_err());
    assert!(serde_json::from_str::<TwoSidedMessage<RightsDelta>>("null").is_err());
}

/// Randomly damaged encodings decode to an error or to a state that works:
/// nothing panics, whatever the bytes.
fn damage_then_use<S>(seed_value: Value, edits: Vec<(usize, u64)>)
where
    S: RightsState + Serialize + DeserializeOwned,
    S::Message: Serialize + DeserializeOwned,
{
    fn leaves(value: &Value) -> usize {
        match value {
            Value::Array(items) => items.iter().map(leaves).sum(),
            Value::Object(map) => map.values().map(leaves).sum(),
            _ => 1,
        }
    }
    /// Replaces leaf number `target` (depth first) with `new`.
    fn replace(value: &mut Value, target: &mut usize, new: u64) {
        match value {
            Value::Array(items) => items.iter_mut().for_each(|item| replace(item, target, new)),
            Value::Object(map) => map.values_mut().for_each(|item| replace(item, target, new)),
            leaf => {
                if *target == 0 {
                    *leaf = json!(new);
                }
                *target = target.wrapping_sub(1);
            }
        }
    }
    let mut value = seed_value;
    let count = leaves(&value);
    for (at, new) in edits {
        replace(&mut value, &mut (at % count), new);
    }
    if let Ok(mut counter) = serde_json::from_value::<BoundedCounter<S>>(value) {
        let _ = counter.value();
        let _ = counter.local_rights();
        let _ = counter.decrement(1);
        let _ = counter.increment(u64::MAX);
        let _ = counter.transfer(1, R1);
        let _ = counter.rights_view();
        if let Ok(message) = counter.message_for(R1) {
            let text = serde_json::to_string(&message).unwrap();
            let _ = serde_json::from_str::<CounterMessage<S::Message>>(&text).unwrap();
        }
    }
}

proptest! {
    #[test]
    fn damaged_encodings_never_panic(
        edits in prop::collection::vec(
            (any::<usize>(), prop_oneof![Just(0u64), Just(1), Just(2), Just(7), Just(u64::MAX), any::<u64>()]),
            1..4,
        )
    ) {
        let (full, _) = busy::<FullRights>();
        damage_then_use::<FullRights>(serde_json::to_value(&full).unwrap(), edits.clone());
        let (compact, _) = busy::<CompactRights>();
        damage_then_use::<CompactRights>(serde_json::to_value(&compact).unwrap(), edits);
    }

    #[test]
    fn damaged_deltas_are_rejected_or_merged_safely(
        at in any::<usize>(),
        new in prop_oneof![Just(0u64), Just(1), Just(3), Just(u64::MAX), any::<u64>()],
    ) {
        let (c0, c1) = busy::<CompactRights>();
        let mut value = serde_json::to_value(c1.message_for(R0).unwrap()).unwrap();
        let fields = ["from", "to", "transferred_from_to"];
        let field = fields[at % fields.len()];
        value["rights"][field] = json!(new);
        if let Ok(delta) = serde_json::from_value::<CounterMessage<RightsDelta>>(value) {
            let mut receiver = c0.clone();
            if receiver.merge(&delta).is_err() {
                prop_assert_eq!(&receiver, &c0, "a rejected merge changed the state");
            } else {
                // An accepted merge only moves up the lattice, and merging
                // the same delta again changes nothing.
                prop_assert!(c0.le(&receiver), "a merge went down the lattice");
                let once = receiver.clone();
                prop_assert!(receiver.merge(&delta).is_ok());
                prop_assert_eq!(&receiver, &once, "a second merge changed the state");
            }
            // Reading the result is an answer or a clear overflow, never a panic.
            let _ = receiver.local_rights();
            let _ = receiver.value();
        }
    }
}

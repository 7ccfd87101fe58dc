//! Property tests of the wire format: every envelope round-trips, frames split
//! anywhere reassemble, and arbitrary bytes are rejected without a panic.

use proptest::prelude::*;
use roost_net::frame::{decode_frame, encode_frame, FrameError, LENGTH_PREFIX_BYTES};
use roost_net::fuzzing::FuzzMsg;
use roost_net::{Envelope, EpochId, NodeId};

fn msg() -> impl Strategy<Value = FuzzMsg> {
    prop_oneof![
        any::<u64>().prop_map(FuzzMsg::Ping),
        ".{0,40}".prop_map(FuzzMsg::Text),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(FuzzMsg::Bytes),
        (
            any::<Option<u32>>(),
            proptest::collection::vec(any::<(u16, i64)>(), 0..10)
        )
            .prop_map(|(a, b)| FuzzMsg::Pair { a, b }),
        Just(FuzzMsg::Unit),
    ]
}

fn envelope() -> impl Strategy<Value = Envelope<FuzzMsg>> {
    (any::<u32>(), any::<u32>(), any::<u64>(), msg()).prop_map(|(from, to, epoch, msg)| {
        Envelope::new(NodeId(from), NodeId(to), EpochId(epoch), msg)
    })
}

const LIMIT: u32 = 1 << 20;

proptest! {
    #[test]
    fn envelopes_round_trip(envelope in envelope()) {
        let bytes = encode_frame(&envelope).unwrap();
        let (decoded, used) = decode_frame::<FuzzMsg>(&bytes, LIMIT).unwrap().unwrap();
        prop_assert_eq!(decoded, envelope);
        prop_assert_eq!(used, bytes.len());
    }

    #[test]
    fn a_stream_of_frames_splits_anywhere(
        envelopes in proptest::collection::vec(envelope(), 1..8),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let stream: Vec<u8> = envelopes.iter().flat_map(|e| encode_frame(e).unwrap()).collect();
        let mut cut_points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        cut_points.push(stream.len());
        cut_points.sort_unstable();
        // Feed the stream in chunks, as a socket would.
        let mut buffer = Vec::new();
        let mut decoded = Vec::new();
        let mut fed = 0;
        for cut in cut_points {
            buffer.extend_from_slice(&stream[fed..cut]);
            fed = cut;
            while let Some((envelope, used)) = decode_frame::<FuzzMsg>(&buffer, LIMIT).unwrap() {
                decoded.push(envelope);
                buffer.drain(..used);
            }
        }
        prop_assert!(buffer.is_empty());
        prop_assert_eq!(decoded, envelopes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_frame::<FuzzMsg>(&bytes, 256);
    }

    #[test]
    fn damaged_frames_are_errors_or_other_messages(
        envelope in envelope(),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut bytes = encode_frame(&envelope).unwrap();
        let at = LENGTH_PREFIX_BYTES + flip.index(bytes.len() - LENGTH_PREFIX_BYTES);
        bytes[at] ^= 1 << bit;
        match decode_frame::<FuzzMsg>(&bytes, LIMIT) {
            Ok(Some((other, _))) => prop_assert_ne!(other, envelope),
            Ok(None) => prop_assert!(false, "a whole frame is never incomplete"),
            Err(_) => {}
        }
    }
}

#[test]
fn a_huge_length_is_rejected_before_buffering() {
    let mut bytes = u32::MAX.to_le_bytes().to_vec();
    bytes.push(0);
    assert!(matches!(
        decode_frame::<FuzzMsg>(&bytes, LIMIT),
        Err(FrameError::TooLarge { .. })
    ));
}

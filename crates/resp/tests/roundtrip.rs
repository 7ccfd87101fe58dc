//! Property tests of the protocol: frames round-trip through the encoder and
//! the parser in both protocols; requests split at any points parse back
//! whole; arbitrary bytes never make either parser panic; the in-place
//! parser agrees with the copying one.

use proptest::prelude::*;
use roost_resp::protocol::{parse_frame, Frame, InPlace, Limits, Protocol, RequestParser};

fn text() -> impl Strategy<Value = String> {
    // Simple strings and errors cannot hold CR or LF.
    "[a-zA-Z0-9 _:.-]{0,16}"
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..24)
}

fn frame() -> impl Strategy<Value = Frame> {
    let leaf = prop_oneof![
        text().prop_map(Frame::Simple),
        text().prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        bytes().prop_map(Frame::Bulk),
        Just(Frame::Null),
        any::<bool>().prop_map(Frame::Boolean),
        // NaN is not equal to itself; everything else must come back exactly.
        any::<f64>()
            .prop_filter("not NaN", |d| !d.is_nan())
            .prop_map(Frame::Double),
        "-?[1-9][0-9]{0,30}".prop_map(Frame::BigNumber),
        bytes().prop_map(Frame::BulkError),
        bytes().prop_map(|text| Frame::Verbatim {
            format: *b"txt",
            text
        }),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Frame::Array),
            prop::collection::vec(inner.clone(), 0..6).prop_map(Frame::Set),
            prop::collection::vec(inner.clone(), 0..6).prop_map(Frame::Push),
            prop::collection::vec((inner.clone(), inner), 0..4).prop_map(Frame::Map),
        ]
    })
}

/// RESP2 has one nil for both; after a RESP2 round trip `Null` inside an
/// aggregate stays `Null` (`$-1`).
fn resp2_expected(frame: &Frame) -> Frame {
    frame.downgraded()
}

proptest! {
    #[test]
    fn resp3_frames_round_trip(frame in frame()) {
        let mut encoded = Vec::new();
        frame.encode(Protocol::Resp3, &mut encoded);
        let (parsed, used) = parse_frame(&encoded, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(used, encoded.len());
        prop_assert_eq!(parsed, frame);
    }

    #[test]
    fn resp2_frames_round_trip_downgraded(frame in frame()) {
        let mut encoded = Vec::new();
        frame.encode(Protocol::Resp2, &mut encoded);
        let (parsed, used) = parse_frame(&encoded, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(used, encoded.len());
        prop_assert_eq!(parsed, resp2_expected(&frame));
    }

    #[test]
    fn every_proper_prefix_is_incomplete(frame in frame()) {
        let mut encoded = Vec::new();
        frame.encode(Protocol::Resp3, &mut encoded);
        for cut in 0..encoded.len() {
            prop_assert_eq!(parse_frame(&encoded[..cut], &Limits::default()), Ok(None));
        }
    }

    #[test]
    fn requests_split_anywhere_parse_whole(
        requests in prop::collection::vec(prop::collection::vec(bytes(), 1..5), 1..5),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut wire = Vec::new();
        for request in &requests {
            Frame::Array(request.iter().cloned().map(Frame::Bulk).collect())
                .encode(Protocol::Resp2, &mut wire);
        }
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
        points.push(wire.len());
        points.sort_unstable();
        let mut parser = RequestParser::new(Limits::default());
        let mut buffer = Vec::new();
        let mut fed = 0;
        let mut parsed = Vec::new();
        for point in points {
            buffer.extend_from_slice(&wire[fed..point]);
            fed = point;
            loop {
                let step = parser.parse(&buffer).unwrap();
                buffer.drain(..step.consumed);
                match step.request {
                    Some(r) => parsed.push(r),
                    None => break,
                }
            }
        }
        prop_assert!(buffer.is_empty());
        prop_assert_eq!(parsed, requests);
    }

    #[test]
    fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..256)) {
        let limits = Limits { max_bulk_bytes: 64, max_array_len: 8, max_inline_bytes: 64, max_nesting: 4, max_request_bytes: 4096 };
        let _ = parse_frame(&input, &limits);
        let mut parser = RequestParser::new(limits);
        let mut rest = &input[..];
        while let Ok(step) = parser.parse(rest) {
            rest = &rest[step.consumed..];
            if step.request.is_none() {
                break;
            }
        }
    }

    #[test]
    fn in_place_parsing_matches_copying(
        requests in prop::collection::vec(prop::collection::vec(bytes(), 0..5), 1..5),
        garbage in prop::collection::vec(any::<u8>(), 0..16),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        // Well-formed requests (empty ones too), then arbitrary bytes.
        let mut wire = Vec::new();
        for request in &requests {
            Frame::Array(request.iter().cloned().map(Frame::Bulk).collect())
                .encode(Protocol::Resp2, &mut wire);
        }
        wire.extend_from_slice(&garbage);
        let limits = Limits { max_bulk_bytes: 20, max_array_len: 3, ..Limits::default() };
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
        points.push(wire.len());
        points.sort_unstable();
        let run = |in_place: bool| {
            let mut parser = RequestParser::new(limits);
            let mut spans = Vec::new();
            let mut buffer = Vec::new();
            let mut fed = 0;
            let mut parsed = Vec::new();
            for &point in &points {
                buffer.extend_from_slice(&wire[fed..point]);
                fed = point;
                loop {
                    let step = if in_place {
                        parser.parse_in_place(&buffer, &mut spans)
                    } else {
                        parser.parse(&buffer).map(InPlace::Parsed)
                    };
                    let (used, request) = match step {
                        Err(e) => {
                            parsed.push(Err(e));
                            return parsed;
                        }
                        Ok(InPlace::Spans { consumed }) => {
                            let request: Vec<Vec<u8>> =
                                spans.iter().map(|s| buffer[s.clone()].to_vec()).collect();
                            (consumed, Some(request))
                        }
                        Ok(InPlace::Parsed(p)) => (p.consumed, p.request),
                    };
                    buffer.drain(..used);
                    match request {
                        Some(r) => parsed.push(Ok(r)),
                        None => break,
                    }
                }
            }
            parsed
        };
        prop_assert_eq!(run(true), run(false));
    }
}

//! Arbitrary bytes through both RESP parsers: the server's incremental
//! request parser (fed in two pieces, split where the first byte says) and
//! the general frame parser. Neither may panic; a request parsed from the
//! pieces must equal the one parsed from the whole input; a frame parsed and
//! re-encoded as RESP3 must parse back to itself.
//!
//! Run with `cargo fuzz run parse -s none` from `crates/resp` (nightly and
//! cargo-fuzz needed; `-s none`: no sanitizer, the parsers are safe Rust).
#![no_main]

use libfuzzer_sys::fuzz_target;
use roost_resp::protocol::{parse_frame, Limits, Protocol, RequestParser};

fn requests(limits: Limits, pieces: &[&[u8]]) -> Result<Vec<Vec<Vec<u8>>>, String> {
    let mut parser = RequestParser::new(limits);
    let mut buffer = Vec::new();
    let mut out = Vec::new();
    for piece in pieces {
        buffer.extend_from_slice(piece);
        loop {
            let step = parser.parse(&buffer).map_err(|e| e.to_string())?;
            assert!(step.consumed <= buffer.len());
            buffer.drain(..step.consumed);
            match step.request {
                Some(request) => {
                    assert!(!request.is_empty() && request.len() <= limits.max_array_len);
                    out.push(request);
                }
                None => break,
            }
        }
    }
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_bulk_bytes: 512,
        max_array_len: 16,
        max_inline_bytes: 256,
        max_nesting: 8,
        max_request_bytes: 4096,
    };
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(input.len());
    let whole = requests(limits, &[input]);
    let pieces = requests(limits, &[&input[..at], &input[at..]]);
    if let (Ok(whole), Ok(pieces)) = (&whole, &pieces) {
        assert_eq!(whole, pieces);
    }
    if let Ok(Some((frame, used))) = parse_frame(input, &limits) {
        assert!(used <= input.len());
        let mut encoded = Vec::new();
        frame.encode(Protocol::Resp3, &mut encoded);
        if let Ok(Some((again, _))) = parse_frame(&encoded, &limits) {
            // NaN doubles are the one value not equal to itself.
            if !format!("{frame:?}").contains("NaN") {
                assert_eq!(again, frame);
            }
        }
    }
});

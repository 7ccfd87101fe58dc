//! Any byte string fed to the frame decoder is either decoded or rejected with
//! an error; it never panics and never allocates more than the frame limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roost_net::frame::{decode_frame, DEFAULT_MAX_FRAME_BYTES};
use roost_net::fuzzing::FuzzMsg;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    // Bounded: every successful decode consumes at least the 4-byte prefix.
    for _ in 0..data.len() / 4 + 1 {
        match decode_frame::<FuzzMsg>(rest, DEFAULT_MAX_FRAME_BYTES) {
            Ok(Some((_, consumed))) => {
                assert!(consumed >= 4 && consumed <= rest.len());
                rest = &rest[consumed..];
            }
            Ok(None) | Err(_) => break,
        }
    }
});

//! Any byte string fed to the handshake decoder is either decoded or rejected
//! with an error; it never panics, never reads past the message size limit,
//! and what decodes encodes back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roost_net::auth::{decode_handshake, encode_handshake, MAX_HANDSHAKE_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((msg, used))) = decode_handshake(data) {
        assert!(used <= 4 + MAX_HANDSHAKE_BYTES && used <= data.len());
        assert_eq!(encode_handshake(&msg), &data[..used]);
    }
});

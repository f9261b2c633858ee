//! `verify_hmac`: see `ankusa_edge::fuzz` (the target is defined there, shared
//! with the bounded run of `cargo test`).
#![no_main]

use ankusa_edge::fuzz::Scheme;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ankusa_edge::fuzz::verify(Scheme::Hmac, data);
});

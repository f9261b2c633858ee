//! `request`: see `ankusa_edge::fuzz` (the target is defined there, shared
//! with the bounded run of `cargo test`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ankusa_edge::fuzz::request(data);
});

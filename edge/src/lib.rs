//! The edge's deciding core: what the ingest path checks and resolves for one
//! request before anything is stored (docs/design.md sections 5 and 10, ADR 0004
//! section 2).
//!
//! # What it owns
//! - [`verify`]: provider signature verification (GitHub, Stripe, Shopify,
//!   Slack, Standard Webhooks / Svix, Twilio, a generic HMAC header), several
//!   secrets per source, timestamp tolerance in both directions. Any error is a
//!   401 and nothing is stored.
//! - [`dedupe`]: the dedupe key of a hook (`{header}` or `{json}`), hashed over
//!   [`dedupe::DEDUPE_KEY_MAX_BYTES`].
//! - [`ordering`]: the ordering key of a laned sink, resolved at ingest; `None`
//!   is the sink's keyless lane.
//! - [`filter`]: whether a sink takes a hook at all (its `filter`), decided
//!   with the ordering keys: a sink whose filter fails gets no row.
//! - [`slack`]: the `url_verification` handshake the edge answers itself.
//! - [`sign`]: the provider's side of each verified scheme (the signature a
//!   provider writes), for `ankusa send --resign` and the fuzz targets.
//! - [`KeySpec`] and [`ParsedBody`]: where a key comes from, and the one lazy
//!   JSON decode that dedupe, every ordering key and every filter of a hook
//!   share.
//! - `fuzz` (behind the feature of that name): the fuzz targets of all of the
//!   above and of the request path (README, "Fuzzing the edge"), shared by
//!   cargo-fuzz (`fuzz/`) and the bounded run of `cargo test`.
//!
//! # Invariants it keeps
//! - The body is only read: nothing here re-serialises it, so the stored bytes
//!   are the received bytes (Shopify's `\/`, integers above 2^53, key order,
//!   whitespace).
//! - Header names match ASCII case-insensitively; a header that appears more
//!   than once counts by its first value; header values are used as the bytes
//!   received, never re-encoded (docs/design.md section 10).
//! - No input makes these functions panic.
//!
//! # Purity
//! No clock, no I/O, no tokio or hyper: plain functions over the header list
//! (`&[(name, value)]` as bytes), the body bytes and `now_ms`. The hyper server
//! that calls them lives beside them in this crate, later.
#![deny(missing_docs, clippy::unwrap_used)]

mod body;
pub mod dedupe;
pub mod filter;
// Compiled only for cargo-fuzz (`fuzz/`) and the edge's own bounded run
// (`edge/tests/it/fuzz.rs`): the relay does not carry it.
#[cfg(feature = "fuzz")]
pub mod fuzz;
mod hex;
mod keyspec;
pub mod ordering;
#[cfg(feature = "server")]
pub mod server;
pub mod sign;
pub mod slack;
pub mod verify;

pub use body::{JSON_KEY_MAX_BYTES, ParsedBody};
pub use keyspec::{KeySpec, KeySpecError};
pub use verify::{
    DEFAULT_TOLERANCE_MS, HmacAlgorithm, HmacHeader, Secret, SecretError, SignatureEncoding,
    Verified, Verifier, VerifyError,
};

/// One request header as received: `(name, value)`, both raw bytes. The list is
/// in the order the headers arrived.
pub type Header<'a> = (&'a [u8], &'a [u8]);

/// The value of the first header called `name` (ASCII case-insensitive), as
/// received; `None` when there is none. Later headers of the same name are
/// ignored (docs/design.md section 10).
pub fn first_header<'a>(headers: &[Header<'a>], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| *v)
}

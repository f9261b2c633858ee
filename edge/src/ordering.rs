//! The ordering key of a hook for one laned sink, resolved at ingest (ADR 0004
//! section 2; docs/design.md section 10), before the row is committed: the lane a row
//! joins is fixed by it. `None` is the sink's shared keyless lane (an ordered
//! sink never falls back to unordered).
//!
//! The normalisation (empty is no key, over 128 bytes is hashed) is
//! [`ankusa_lanes::normalize_key`], the same function the lanes use, so a key
//! resolved here and a key recomputed from a stored envelope (archive replay,
//! quarantine release) are equal.

use crate::{Header, KeySpec, ParsedBody};

/// The longest ordering key kept as is (the SQS group id limit): 128 bytes.
pub const ORDERING_KEY_MAX_BYTES: usize = ankusa_lanes::KEY_MAX_BYTES;

/// The ordering key of a hook under `spec`:
/// - `{header}`: the first value (name ASCII case-insensitive), the bytes as
///   received, so two different invalid-UTF-8 values never merge.
/// - `{json}`: the string at the path (object members only), from `body`'s
///   shared decode; a body over [`crate::JSON_KEY_MAX_BYTES`], invalid JSON,
///   a missing member or a non-string value (number, null, object) is no key.
/// - An empty key is no key; a key over [`ORDERING_KEY_MAX_BYTES`] becomes
///   `"sha256:"` + 64 lower-case hex digits.
///
/// `None` means the keyless lane; the caller counts
/// `ankusa_dispatch_lane_key_missing_total{sink}`.
pub fn ordering_key(
    spec: &KeySpec,
    headers: &[Header<'_>],
    body: &ParsedBody<'_>,
) -> Option<Vec<u8>> {
    spec.raw(headers, body)
        .and_then(ankusa_lanes::normalize_key)
}

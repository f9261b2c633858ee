//! The dedupe key of a hook (docs/design.md sections 5 and 10): a provider retry that
//! carries the same key as a hook already accepted by the same source is
//! answered 200 and writes nothing. This module only computes the key; the
//! ?K lookup and the record (scoped per source) are the queue's.

use sha2::{Digest, Sha256};

use crate::{Header, KeySpec, ParsedBody, hex};

/// The longest dedupe key kept as is; a longer one becomes `"sha256:"` + the
/// lower-case hex of its SHA-256 (71 bytes), as ADR 0004 section 2 says the
/// dedupe key does past 200 bytes.
pub const DEDUPE_KEY_MAX_BYTES: usize = 200;

/// The dedupe key of a hook under `spec`, or `None` when the hook has none
/// (it is then never a duplicate):
/// - `{header}`: the first value of the header, the bytes as received; a
///   missing or empty header is no key.
/// - `{json}`: the string at the path, read from `body`'s shared decode; a body
///   over [`crate::JSON_KEY_MAX_BYTES`], a body that is not JSON, a missing
///   member or a non-string value is no key, and so is `""`.
/// - A key over [`DEDUPE_KEY_MAX_BYTES`] is hashed ([`hash_long_key`]).
pub fn dedupe_key(
    spec: &KeySpec,
    headers: &[Header<'_>],
    body: &ParsedBody<'_>,
) -> Option<Vec<u8>> {
    let raw = spec.raw(headers, body)?;
    if raw.is_empty() {
        return None;
    }
    Some(hash_long_key(raw, DEDUPE_KEY_MAX_BYTES))
}

/// `key` unchanged when it has at most `max_bytes` bytes, otherwise `"sha256:"`
/// followed by the 64 lower-case hex digits of SHA-256(`key`).
pub fn hash_long_key(key: &[u8], max_bytes: usize) -> Vec<u8> {
    if key.len() <= max_bytes {
        return key.to_vec();
    }
    let mut out = b"sha256:".to_vec();
    out.extend_from_slice(hex::encode(&Sha256::digest(key)).as_bytes());
    out
}

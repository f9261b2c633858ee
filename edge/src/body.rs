//! The body of one hook, decoded as JSON at most once and only if a key needs
//! it (ADR 0004 section 2: the ordering key shares the decode with a `{json}`
//! dedupe of the same source).

use std::cell::OnceCell;

use serde_json::Value;

/// The largest body a `{json: path}` key is read from: 1 MiB. A larger body
/// gives no key (ADR 0004 section 2); it is still
/// accepted and stored.
pub const JSON_KEY_MAX_BYTES: usize = 1 << 20;

/// The received body, with a lazily decoded JSON view for key lookups.
///
/// It borrows the bytes and never writes or re-serialises them: what is stored
/// and delivered is `bytes()`, exactly as received. The JSON decode happens on
/// the first [`ParsedBody::str_at`] and is reused by every later lookup of the
/// same hook (dedupe and each ordered sink). A body over
/// [`JSON_KEY_MAX_BYTES`], one that is not UTF-8 JSON, or one nested deeper
/// than serde_json's limit (128) has no JSON view: every lookup is `None`.
///
/// Numbers are decoded by serde_json's default (u64/i64/f64): an integer above
/// 2^53 may lose precision in the view, which is harmless because only string
/// values are ever read and nothing is written back.
#[derive(Debug)]
pub struct ParsedBody<'a> {
    bytes: &'a [u8],
    json: OnceCell<Option<Value>>,
}

impl<'a> ParsedBody<'a> {
    /// A view of `bytes`; nothing is decoded yet.
    pub fn new(bytes: &'a [u8]) -> ParsedBody<'a> {
        ParsedBody {
            bytes,
            json: OnceCell::new(),
        }
    }

    /// The body exactly as received.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Whether the JSON decode has run (it runs at most once). For tests and
    /// metrics.
    pub fn is_decoded(&self) -> bool {
        self.json.get().is_some()
    }

    /// The string at `path` (object members only: a segment never indexes an
    /// array), decoded from its JSON escapes. `None` when the body has no JSON
    /// view, a member is missing, a step is not an object, or the value is not
    /// a string. An empty `path` is the root value.
    pub fn str_at(&self, path: &[String]) -> Option<&str> {
        self.value_at(path)?.as_str()
    }

    /// The JSON value at `path` (object members only), of any type, null
    /// included; `None` as for [`ParsedBody::str_at`] when there is none.
    /// Shares the one decode.
    pub fn value_at(&self, path: &[String]) -> Option<&Value> {
        let mut value = self.json()?;
        for segment in path {
            value = value.as_object()?.get(segment)?;
        }
        Some(value)
    }

    fn json(&self) -> Option<&Value> {
        self.json
            .get_or_init(|| {
                if self.bytes.len() > JSON_KEY_MAX_BYTES {
                    return None;
                }
                serde_json::from_slice(self.bytes).ok()
            })
            .as_ref()
    }
}

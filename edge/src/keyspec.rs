//! Where a key (dedupe or ordering) comes from: a header or a JSON dot path.

use crate::{Header, ParsedBody, first_header};

/// Where a dedupe key or an ordering key is read from (ADR 0004 section 1,
/// YAML `{header: NAME}` or `{json: dot.path}`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeySpec {
    /// The first value of the header with this name (ASCII case-insensitive),
    /// as the bytes received.
    Header(String),
    /// A dot path split into its segments (`"data.object.customer"` is
    /// `["data", "object", "customer"]`); see [`KeySpec::json`].
    Json(Vec<String>),
}

/// A key spec the config cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeySpecError {
    /// A `{header: ...}` with an empty name.
    #[error("empty header name")]
    EmptyHeader,
    /// A `{json: ...}` path that is empty or has an empty segment (`"a..b"`,
    /// `".a"`, `"a."`).
    #[error("json path {path:?} has an empty segment")]
    EmptySegment {
        /// The path as given.
        path: String,
    },
}

impl KeySpec {
    /// `{header: name}`.
    pub fn header(name: &str) -> Result<KeySpec, KeySpecError> {
        if name.is_empty() {
            return Err(KeySpecError::EmptyHeader);
        }
        Ok(KeySpec::Header(name.to_owned()))
    }

    /// `{json: path}`: `path` split on `.` (no escaping: a member name with a
    /// dot cannot be addressed). Each segment names an object member, never an
    /// array index.
    pub fn json(path: &str) -> Result<KeySpec, KeySpecError> {
        let segments: Vec<String> = path.split('.').map(str::to_owned).collect();
        if segments.iter().any(String::is_empty) {
            return Err(KeySpecError::EmptySegment {
                path: path.to_owned(),
            });
        }
        Ok(KeySpec::Json(segments))
    }

    /// The key's raw bytes before any normalisation: the first header value
    /// as received, or the JSON string at the path (unescaped, UTF-8). `None`
    /// when absent; may be empty (callers treat empty as no key).
    pub(crate) fn raw<'a>(
        &self,
        headers: &[Header<'a>],
        body: &'a ParsedBody<'_>,
    ) -> Option<&'a [u8]> {
        match self {
            KeySpec::Header(name) => first_header(headers, name),
            KeySpec::Json(path) => body.str_at(path).map(str::as_bytes),
        }
    }
}

//! The JSON API's plumbing (docs/design.md section 5, "Admin API"): the error
//! shape, query parameters, opaque cursors, limits, times, row ids.
//!
//! Every error is `{"error": {"code", "message"}}` with a 4xx that says what
//! was wrong; only a store failure is a 5xx (503 `store_failed`). Nothing an
//! operator types reaches a panic: every parse here returns an [`ApiError`].

use std::collections::BTreeMap;

use ankusa_keys::{Seq, SinkIx, TenantOrd};
use ankusa_queue::{QueueError, Registry, RowId};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hyper::StatusCode;

use crate::error::JobError;

/// Items a list answers when the request gives no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// The largest `limit` a list accepts; above it is a 400, not a silent clamp.
pub const MAX_LIMIT: usize = 1000;
/// Version byte of every cursor this binary writes; another is a 400.
const CURSOR_VERSION: u8 = 1;
/// Longest resume key a cursor may carry (the widest key of a list is a ?X
/// key, 15 bytes; source names are at most 64).
const CURSOR_KEY_MAX: usize = 128;

/// The message of every 503 `store_failed` of the admin API; the detail is in
/// the relay's log.
pub use crate::error::STORE_FAILED_MESSAGE;

/// An answer other than 2xx: its status, a stable machine-readable `code`
/// (`bad_request`, `unauthorized`, `forbidden`, `not_found`, `method_not_allowed`,
/// `conflict`, `payload_too_large`, `unprocessable`, `unavailable`,
/// `store_failed`) and a message for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The error's code.
    pub code: &'static str,
    /// What was wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// 400 `bad_request`: the request is malformed.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            message: message.into(),
        }
    }
    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: message.into(),
        }
    }
    /// 409 `conflict`: the target is not in a state that allows it.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::CONFLICT,
            code: "conflict",
            message: message.into(),
        }
    }
    /// 422 `unprocessable`: well-formed, but it cannot be done as asked.
    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "unprocessable",
            message: message.into(),
        }
    }
    /// 503 `unavailable`: a task the request needs (the Writer, the
    /// pipeline) is not running (the relay is starting or stopping).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "unavailable",
            message: message.into(),
        }
    }
    /// 503 `store_failed`: the store failed a read or a write. The detail (a
    /// backend's error, which may name the store's files and so the data_dir)
    /// is logged here, never answered: the body says only
    /// [`STORE_FAILED_MESSAGE`] (docs/design.md section 7, "Secrets in
    /// output").
    pub fn store(e: impl std::fmt::Display) -> ApiError {
        tracing::warn!(error = %e, "admin request: the store failed (answered 503 store_failed)");
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "store_failed",
            message: STORE_FAILED_MESSAGE.to_owned(),
        }
    }

    /// The answer's body as its type.
    pub fn answer(&self) -> crate::api_types::Error {
        crate::api_types::Error {
            error: crate::api_types::ErrorDetail {
                code: self.code.to_owned(),
                message: self.message.clone(),
            },
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        to_json(&self.answer())
    }
}

impl From<ankusa_engine::EngineError> for ApiError {
    fn from(e: ankusa_engine::EngineError) -> Self {
        ApiError::store(e)
    }
}

impl From<JobError> for ApiError {
    /// Each kind of domain error as its status and code: invalid 400
    /// `bad_request`, not found 404, conflict 409, unprocessable 422,
    /// unavailable 503 `unavailable`, a store failure 503 `store_failed`
    /// (already logged with its detail when it was made, never answered).
    fn from(e: JobError) -> Self {
        let (status, code) = match &e {
            JobError::Invalid(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            JobError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            JobError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            JobError::Unprocessable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable"),
            JobError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            JobError::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "store_failed"),
        };
        ApiError {
            status,
            code,
            message: e.message().to_owned(),
        }
    }
}

impl From<QueueError> for ApiError {
    /// A row not in the DLQ is a 409 (docs/design.md section 10: a second
    /// revive is refused, never a silent success); every other queue error is
    /// the store's.
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::NotInDlq { .. } => {
                ApiError::conflict("the row is not in the dead-letter queue")
            }
            other => ApiError::store(other),
        }
    }
}

/// The query parameters of a request, each at most once; [`Query::finish`]
/// refuses the ones no handler read, so a typo is a 400 instead of a filter
/// silently ignored.
#[derive(Debug, Default)]
pub struct Query {
    params: BTreeMap<String, String>,
}

impl Query {
    /// Parses `query` (`a=1&b=x`, percent-decoded).
    ///
    /// # Errors
    /// 400 for a parameter given twice.
    pub fn parse(query: Option<&str>) -> Result<Query, ApiError> {
        let mut params = BTreeMap::new();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            if params.insert(k.to_string(), v.to_string()).is_some() {
                return Err(ApiError::bad_request(format!(
                    "query parameter {k:?} given more than once"
                )));
            }
        }
        Ok(Query { params })
    }

    /// Takes parameter `name` (an empty value counts as absent).
    pub fn take(&mut self, name: &str) -> Option<String> {
        self.params.remove(name).filter(|v| !v.is_empty())
    }

    /// `limit`: [`DEFAULT_LIMIT`] when absent, 1..=[`MAX_LIMIT`].
    ///
    /// # Errors
    /// 400 for a value that is not a number in range.
    pub fn limit(&mut self) -> Result<usize, ApiError> {
        let Some(raw) = self.take("limit") else {
            return Ok(DEFAULT_LIMIT);
        };
        match raw.parse::<u64>() {
            Ok(n) if (1..=MAX_LIMIT as u64).contains(&n) => Ok(n as usize),
            _ => Err(ApiError::bad_request(format!(
                "limit {raw:?} is not a number from 1 to {MAX_LIMIT}"
            ))),
        }
    }

    /// A time parameter: unix milliseconds, or an RFC 3339 date-time.
    ///
    /// # Errors
    /// 400 for anything else.
    pub fn time_ms(&mut self, name: &str) -> Result<Option<u64>, ApiError> {
        self.take(name)
            .map(|raw| {
                parse_time_ms(&raw).map_err(|m| ApiError::bad_request(format!("{name}: {m}")))
            })
            .transpose()
    }

    /// Refuses every parameter nobody took.
    ///
    /// # Errors
    /// 400 naming the first unknown parameter.
    pub fn finish(self) -> Result<(), ApiError> {
        match self.params.into_keys().next() {
            None => Ok(()),
            Some(k) => Err(ApiError::bad_request(format!(
                "unknown query parameter {k:?}"
            ))),
        }
    }
}

/// Unix milliseconds from `raw`: digits are unix ms; otherwise an RFC 3339
/// date-time (`2026-01-02T03:04:05Z`, with an offset or fractional seconds).
///
/// # Errors
/// A message for anything else, or a time before 1970.
pub fn parse_time_ms(raw: &str) -> Result<u64, String> {
    if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) {
        return raw
            .parse::<u64>()
            .map_err(|_| format!("{raw:?} is too large for unix milliseconds"));
    }
    let t = time::OffsetDateTime::parse(raw, &time::format_description::well_known::Rfc3339)
        .map_err(|e| {
            format!("{raw:?} is neither unix milliseconds nor an RFC 3339 date-time ({e})")
        })?;
    let ms = t.unix_timestamp_nanos() / 1_000_000;
    u64::try_from(ms).map_err(|_| format!("{raw:?} is before 1970"))
}

/// `ms` as RFC 3339 in UTC (`2026-01-02T03:04:05.678Z`); `None` past year 9999.
pub fn rfc3339(ms: u64) -> Option<String> {
    let nanos = i128::from(ms).checked_mul(1_000_000)?;
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(nanos).ok()?;
    t.format(&time::format_description::well_known::Rfc3339)
        .ok()
}

/// What a cursor resumes: each list has its own kind, so a cursor of one list
/// given to another is a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CursorKind {
    /// `GET /v1/tenants`: the next ordinal.
    Tenants = 1,
    /// `GET /v1/sources`: the next name.
    Sources = 2,
    /// `GET /v1/dead-letters`: the ?X key to resume at.
    DeadLetters = 3,
    /// `GET /v1/jobs`: the id below which to continue (newest first).
    Jobs = 4,
    /// `GET /v1/tenants/{tenant}/quarantine`: the seq after which to continue.
    Quarantine = 5,
}

/// An opaque cursor: base64url (no padding) of `version:8, kind:8, key`.
pub fn encode_cursor(kind: CursorKind, key: &[u8]) -> String {
    let mut raw = vec![CURSOR_VERSION, kind as u8];
    raw.extend_from_slice(key);
    URL_SAFE_NO_PAD.encode(raw)
}

/// The key of a cursor of `kind`.
///
/// # Errors
/// 400 for text that is not one of this binary's cursors of `kind`.
pub fn decode_cursor(kind: CursorKind, text: &str) -> Result<Vec<u8>, ApiError> {
    let bad =
        |why: &str| ApiError::bad_request(format!("cursor {text:?} is not valid here: {why}"));
    let raw = URL_SAFE_NO_PAD
        .decode(text.as_bytes())
        .map_err(|_| bad("not base64url"))?;
    match raw.as_slice() {
        [v, _, ..] if *v != CURSOR_VERSION => Err(bad("unknown version")),
        [_, k, ..] if *k != kind as u8 => Err(bad("it belongs to another list")),
        [_, _, key @ ..] if key.len() <= CURSOR_KEY_MAX => Ok(key.to_vec()),
        _ => Err(bad("wrong length")),
    }
}

/// The text of a row id: `<tenant name>.<seq>.<sink index>` (names have no
/// `.`), e.g. `default.42.0`.
pub fn row_id_text(tenant: &str, row: RowId) -> String {
    format!("{tenant}.{}.{}", row.seq.0, row.sink.0)
}

/// Parses a row id ([`row_id_text`]) against the store's tenants.
///
/// # Errors
/// 400 for a malformed id, 404 for a tenant the store does not know.
pub fn parse_row_id(registry: &Registry, text: &str) -> Result<RowId, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "{text:?} is not a row id: write <tenant>.<seq>.<sink index>, e.g. default.42.0"
        ))
    };
    let mut parts = text.rsplitn(3, '.');
    let (Some(sink), Some(seq), Some(tenant)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let seq: u64 = canonical(seq).ok_or_else(bad)?;
    let sink: u16 = canonical(sink).ok_or_else(bad)?;
    let ord = tenant_ord(registry, tenant)?;
    Ok(RowId::new(ord, Seq(seq), SinkIx(sink)))
}

/// The ordinal of tenant `name`.
///
/// # Errors
/// 404 when the store has no such tenant.
pub fn tenant_ord(registry: &Registry, name: &str) -> Result<TenantOrd, ApiError> {
    Ok(crate::context::tenant_ord(registry, name)?)
}

/// A seq from a path segment.
///
/// # Errors
/// 400 when it is not a number.
pub fn parse_seq(text: &str) -> Result<Seq, ApiError> {
    canonical(text)
        .map(Seq)
        .ok_or_else(|| ApiError::bad_request(format!("seq {text:?} is not a number")))
}

/// A number written the one way the API writes it: decimal digits, no sign,
/// no leading zero (`+8` and `07` are refused, so one row has one id).
pub fn canonical<N: std::str::FromStr>(text: &str) -> Option<N> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

/// `bytes` as text when they are UTF-8 (`null` on the wire otherwise).
pub fn utf8(bytes: &[u8]) -> Option<String> {
    std::str::from_utf8(bytes).ok().map(str::to_owned)
}

/// An answer ([`crate::api_types`]) as the JSON value the listener writes:
/// through `serde_json::Value`, whose objects are sorted by key, so the
/// bytes are those of the answer built field by field. An answer type that
/// cannot be a JSON value (a map with keys that are not text) is a bug: it
/// is logged and written as `null`.
pub fn to_json<T: serde::Serialize>(answer: &T) -> serde_json::Value {
    serde_json::to_value(answer).unwrap_or_else(|e| {
        tracing::error!(error = %e, "an admin answer is not JSON");
        serde_json::Value::Null
    })
}

/// `bytes` as standard base64.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The hyphenated UUID text of an idempotency key.
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*bytes).hyphenated().to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A store error's text (which names the store's files, so the data_dir) is
    /// never in the body; the code says what happened.
    #[test]
    fn a_store_failure_answers_without_the_store_path() {
        let path = "/srv/ankusa/data/store-rocksdb/000012.log";
        let e = ankusa_engine::EngineError::Backend {
            backend: "rocksdb",
            op: "write",
            kind: ankusa_engine::ErrorKind::Io,
            message: format!("IO error: No space left on device: While appending to file: {path}"),
        };
        assert!(e.to_string().contains(path));
        let api = ApiError::from(e);
        assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE);
        let body = api.body().to_string();
        assert!(!body.contains("/srv/ankusa"), "{body}");
        assert_eq!(
            api.body(),
            serde_json::json!({"error": {"code": "store_failed", "message": STORE_FAILED_MESSAGE}})
        );
        let q = ApiError::from(QueueError::from(ankusa_engine::EngineError::Corrupt {
            what: format!("a row at {path}"),
        }));
        assert!(!q.body().to_string().contains("/srv/ankusa"));
    }

    #[test]
    fn cursors_round_trip_and_refuse_what_they_are_not() {
        let c = encode_cursor(CursorKind::DeadLetters, b"X\0\0\0\x01");
        assert_eq!(
            decode_cursor(CursorKind::DeadLetters, &c).unwrap(),
            b"X\0\0\0\x01"
        );
        for bad in [
            "",
            "!!!",
            "AQ",
            &encode_cursor(CursorKind::Tenants, b"x"),
            "AgMx",
        ] {
            let e = decode_cursor(CursorKind::DeadLetters, bad).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
        let long = encode_cursor(CursorKind::DeadLetters, &[0; 200]);
        assert!(decode_cursor(CursorKind::DeadLetters, &long).is_err());
    }

    #[test]
    fn limits_times_and_unknown_parameters() {
        let mut q = Query::parse(Some(
            "limit=1000&since=2026-01-02T03:04:05Z&until=1700000000000&x=1",
        ))
        .unwrap();
        assert_eq!(q.limit().unwrap(), 1000);
        assert_eq!(q.time_ms("since").unwrap(), Some(1_767_323_045_000));
        assert_eq!(q.time_ms("until").unwrap(), Some(1_700_000_000_000));
        assert_eq!(
            q.finish().unwrap_err().message,
            "unknown query parameter \"x\""
        );
        for bad in [
            "limit=0",
            "limit=1001",
            "limit=1000000000",
            "limit=-1",
            "limit=ten",
        ] {
            assert_eq!(
                Query::parse(Some(bad)).unwrap().limit().unwrap_err().status,
                StatusCode::BAD_REQUEST
            );
        }
        assert!(Query::parse(Some("a=1&a=2")).is_err());
        assert_eq!(Query::parse(None).unwrap().limit().unwrap(), DEFAULT_LIMIT);
        for bad in [
            "yesterday",
            "1969-12-31T23:59:59Z",
            "99999999999999999999999",
        ] {
            assert!(parse_time_ms(bad).is_err(), "{bad}");
        }
        assert_eq!(
            rfc3339(1_767_323_045_678).as_deref(),
            Some("2026-01-02T03:04:05.678Z")
        );
        assert_eq!(rfc3339(u64::MAX), None);
    }

    #[test]
    fn row_ids_parse_against_the_registry() {
        let mut reg = Registry::default();
        reg.tenants.insert("acme-1".into(), TenantOrd(3));
        let row = parse_row_id(&reg, "acme-1.42.7").unwrap();
        assert_eq!(row, RowId::new(TenantOrd(3), Seq(42), SinkIx(7)));
        assert_eq!(row_id_text("acme-1", row), "acme-1.42.7");
        assert_eq!(
            parse_row_id(&reg, "nobody.1.0").unwrap_err().status,
            StatusCode::NOT_FOUND
        );
        // One row, one id: a sign or a leading zero is another spelling.
        for bad in [
            "",
            "acme-1",
            "acme-1.1",
            "acme-1.x.0",
            "acme-1.1.70000",
            "acme-1.-1.0",
            "..",
            "acme-1.+8.0",
            "acme-1.07.0",
            "acme-1.7.00",
        ] {
            assert_eq!(
                parse_row_id(&reg, bad).unwrap_err().status,
                StatusCode::BAD_REQUEST,
                "{bad}"
            );
        }
    }
}

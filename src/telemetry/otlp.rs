//! The OTLP/HTTP span exporter of the `otel` build: each batch the SDK's
//! batch span processor hands over becomes one `ExportTraceServiceRequest`
//! (OTLP's protobuf, `opentelemetry/proto/collector/trace/v1`), POSTed as
//! `application/x-protobuf` to the collector's traces URL with reqwest (the
//! HTTP sink's build: rustls with ring).
//!
//! Our own ~150 lines of protobuf writing instead of opentelemetry-otlp:
//! that crate's message types are prost's, and prost-derive's itertools
//! turns on `either/use_std` among the build's host crates, which changes
//! bindgen's build and so rebuilds RocksDB (the `otel` build must share the
//! default build's RocksDB). The encoding follows opentelemetry-proto's
//! conversion field for field (`trace.proto`, `common.proto`,
//! `resource.proto` of OTLP 1.x); tests/it/otel.rs decodes what the relay
//! sent.
//!
//! Failures: a batch the collector does not take (no answer within the
//! timeout, a refused connection, a non-2xx status) is dropped, never
//! retried or kept (the relay holds no spans on disk). The first failure
//! logs a warning, and one a minute while it lasts, with how many spans were
//! dropped; the first success after says so.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// Where the exporter posts.
#[derive(Debug, PartialEq)]
pub(crate) struct Target {
    /// The traces URL (`.../v1/traces`).
    pub url: reqwest::Url,
    /// Extra headers (`OTEL_EXPORTER_OTLP_HEADERS`: a collector's token),
    /// checked as header names and values.
    pub headers: Vec<(String, String)>,
    /// One export's timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`).
    pub timeout: Duration,
}

/// The most of a collector's 2xx answer the exporter reads, bytes (an
/// `ExportTraceServiceResponse` is a few bytes, or a short partial-success
/// message): a longer body is dropped unread, not buffered.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// How often a collector that keeps failing is warned about again.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The exporter ([`SpanExporter`]): a client, the target, the encoded
/// resource, and the state of the failure warnings.
pub(crate) struct OtlpExporter {
    client: reqwest::Client,
    url: reqwest::Url,
    /// `url` with any credentials hidden, for the log lines.
    shown: String,
    headers: reqwest::header::HeaderMap,
    /// The `Resource` message, encoded once ([`SpanExporter::set_resource`]).
    resource: Vec<u8>,
    health: Mutex<Health>,
}

impl fmt::Debug for OtlpExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No headers: they may carry a token.
        f.debug_struct("OtlpExporter")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

/// The exports that failed since the last success.
#[derive(Default)]
struct Health {
    /// When the last warning was written (`None`: the last export worked).
    warned: Option<Instant>,
    /// Spans dropped since that warning.
    dropped: u64,
    /// Spans dropped since the last success.
    dropped_total: u64,
}

impl OtlpExporter {
    /// The exporter of `target` (no connection yet).
    ///
    /// # Errors
    /// A header the client refuses, or a client that cannot be built.
    pub(crate) fn new(target: Target) -> Result<OtlpExporter, String> {
        ankusa_sinks::http::install_crypto_provider();
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &target.headers {
            let n = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("OTLP header {name}: not a header name"))?;
            let mut v = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| format!("OTLP header {name}: not a header value"))?;
            v.set_sensitive(true);
            headers.insert(n, v);
        }
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            reqwest::header::HeaderValue::from_static("application/x-protobuf"),
        );
        let client = reqwest::Client::builder()
            .timeout(target.timeout)
            // A collector's redirect is a misconfiguration to see, not to follow.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("OTel export: cannot build the HTTP client: {e}"))?;
        Ok(OtlpExporter {
            client,
            shown: ankusa_config::redact_url(target.url.as_str()),
            url: target.url,
            headers,
            resource: encode_resource(&Resource::builder_empty().build()),
            health: Mutex::new(Health::default()),
        })
    }

    /// Posts one encoded request; `Err` says why the collector did not take it.
    async fn post(&self, body: Vec<u8>) -> Result<(), String> {
        let r = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .body(body)
            .send()
            .await;
        match r {
            Ok(mut r) if r.status().is_success() => {
                // Read the answer (an ExportTraceServiceResponse, a few
                // bytes) so the connection goes back to the pool; past
                // MAX_ANSWER_BYTES it is not a collector's answer: stop
                // reading (the connection is closed, not pooled).
                let mut read = 0usize;
                while let Ok(Some(chunk)) = r.chunk().await {
                    read += chunk.len();
                    if read > MAX_ANSWER_BYTES {
                        break;
                    }
                }
                Ok(())
            }
            Ok(r) => Err(format!("HTTP {}", r.status())),
            Err(e) if e.is_timeout() => Err("no answer within the timeout".to_owned()),
            Err(e) => Err(error_chain(&e)),
        }
    }

    /// Notes an export of `spans` spans that worked, or failed with `why`,
    /// and logs what the module docs say.
    fn note(&self, spans: usize, outcome: Result<(), String>) {
        let Ok(mut h) = self.health.lock() else {
            return;
        };
        match outcome {
            Ok(()) => {
                if h.warned.take().is_some() {
                    tracing::info!(
                        endpoint = %self.shown,
                        dropped_spans = h.dropped_total,
                        "OTel export to {} works again ({} spans were dropped while it failed)",
                        self.shown,
                        h.dropped_total
                    );
                }
                *h = Health::default();
            }
            Err(why) => {
                h.dropped += spans as u64;
                h.dropped_total += spans as u64;
                let due = h.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY);
                if due {
                    tracing::warn!(
                        endpoint = %self.shown,
                        error = %why,
                        dropped_spans = h.dropped,
                        "OTel export to {} failed ({why}): {} spans dropped; spans are dropped until the collector takes an export \
                         (warned again each minute while it fails)",
                        self.shown,
                        h.dropped
                    );
                    h.warned = Some(Instant::now());
                    h.dropped = 0;
                }
            }
        }
    }
}

/// `e` and its sources, `: `-joined (reqwest's own message is only the
/// outer one: "error sending request").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        next = c.source();
    }
    s
}

impl SpanExporter for OtlpExporter {
    /// Encodes and posts `batch`; always `Ok` (a failure is logged and the
    /// batch dropped here: the processor would only log it again).
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let body = encode_request(&self.resource, &batch);
        drop(batch);
        let outcome = self.post(body).await;
        self.note(n, outcome);
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = encode_resource(resource);
    }
}

// ---- protobuf ---------------------------------------------------------

/// Protobuf's wire types used here.
#[derive(Clone, Copy)]
enum Wire {
    Varint = 0,
    Fixed64 = 1,
    Len = 2,
    Fixed32 = 5,
}

/// A protobuf writer: fields appended in order; a nested message is written
/// in place and its length put in front of it when it ends.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: Wire) {
        self.varint((u64::from(field) << 3) | wire as u64);
    }

    /// A `uint32`/`uint64`/enum field, left out when 0 (proto3's default).
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, Wire::Varint);
            self.varint(v);
        }
    }

    /// An `int64` member of a oneof: written even when 0.
    fn int64(&mut self, field: u32, v: i64) {
        self.key(field, Wire::Varint);
        self.varint(v as u64);
    }

    /// A `bool` member of a oneof: written even when false.
    fn bool(&mut self, field: u32, v: bool) {
        self.key(field, Wire::Varint);
        self.varint(u64::from(v));
    }

    fn double(&mut self, field: u32, v: f64) {
        self.key(field, Wire::Fixed64);
        self.0.extend_from_slice(&v.to_bits().to_le_bytes());
    }

    fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, Wire::Fixed64);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn fixed32(&mut self, field: u32, v: u32) {
        self.key(field, Wire::Fixed32);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    /// A `bytes`/`string` field, written even when empty (a oneof member).
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, Wire::Len);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    /// A `string` field, left out when empty.
    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    /// A nested message: `f` writes its fields.
    fn message(&mut self, field: u32, f: impl FnOnce(&mut Pb)) {
        self.key(field, Wire::Len);
        let start = self.0.len();
        f(self);
        let len = self.0.len() - start;
        let mut prefix = Pb::default();
        prefix.varint(len as u64);
        self.0.splice(start..start, prefix.0);
    }
}

/// `KeyValue { key = 1; value = 2 (AnyValue) }`.
fn key_value(pb: &mut Pb, field: u32, kv: &KeyValue) {
    pb.message(field, |m| {
        m.string(1, kv.key.as_str());
        m.message(2, |v| any_value(v, &kv.value));
    });
}

/// `AnyValue`'s oneof: `string_value = 1`, `bool_value = 2`, `int_value =
/// 3`, `double_value = 4`, `array_value = 5` (`ArrayValue { repeated
/// AnyValue values = 1 }`).
fn any_value(pb: &mut Pb, v: &Value) {
    match v {
        Value::Bool(b) => pb.bool(2, *b),
        Value::I64(i) => pb.int64(3, *i),
        Value::F64(f) => pb.double(4, *f),
        Value::String(s) => pb.bytes(1, s.as_str().as_bytes()),
        Value::Array(a) => pb.message(5, |arr| match a {
            Array::Bool(v) => v.iter().for_each(|b| arr.message(1, |x| x.bool(2, *b))),
            Array::I64(v) => v.iter().for_each(|i| arr.message(1, |x| x.int64(3, *i))),
            Array::F64(v) => v.iter().for_each(|f| arr.message(1, |x| x.double(4, *f))),
            Array::String(v) => v
                .iter()
                .for_each(|s| arr.message(1, |x| x.bytes(1, s.as_str().as_bytes()))),
            // A kind of array added to the API later: its text.
            other => arr.message(1, |x| x.bytes(1, other.to_string().as_bytes())),
        }),
        // A kind of value added to the API later: its text.
        other => pb.bytes(1, other.as_str().as_bytes()),
    }
}

/// `Resource { repeated KeyValue attributes = 1 }`, encoded alone (the
/// exporter keeps it and copies it into each request).
fn encode_resource(r: &Resource) -> Vec<u8> {
    let mut pb = Pb::default();
    let mut attrs: Vec<(&opentelemetry::Key, &Value)> = r.iter().collect();
    // The resource's map has no order of its own: a stable one.
    attrs.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    for (k, v) in attrs {
        key_value(&mut pb, 1, &KeyValue::new(k.clone(), v.clone()));
    }
    pb.0
}

/// Nanoseconds since the Unix epoch (0 before it).
fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// `Span.kind`: `SPAN_KIND_INTERNAL = 1` ... `SPAN_KIND_CONSUMER = 5`.
fn kind(k: &SpanKind) -> u64 {
    match k {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

/// `Span.flags`: the W3C trace flags, with bit 8 set (the flags say whether
/// the parent is remote) and bit 9 when it is.
fn span_flags(trace_flags: u8, parent_is_remote: bool) -> u32 {
    u32::from(trace_flags) | 0x100 | if parent_is_remote { 0x200 } else { 0 }
}

/// One `Span` (`trace.proto`): ids, trace state, parent, flags, name, kind,
/// times, attributes, events, links, status, and the dropped counts.
fn span(pb: &mut Pb, field: u32, s: &SpanData) {
    pb.message(field, |m| {
        let cx = &s.span_context;
        m.bytes(1, &cx.trace_id().to_bytes());
        m.bytes(2, &cx.span_id().to_bytes());
        m.string(3, &cx.trace_state().header());
        if s.parent_span_id != opentelemetry::trace::SpanId::INVALID {
            m.bytes(4, &s.parent_span_id.to_bytes());
        }
        m.string(5, &s.name);
        m.uint(6, kind(&s.span_kind));
        m.fixed64(7, unix_nanos(s.start_time));
        m.fixed64(8, unix_nanos(s.end_time));
        for kv in &s.attributes {
            key_value(m, 9, kv);
        }
        m.uint(10, u64::from(s.dropped_attributes_count));
        for e in &s.events.events {
            m.message(11, |ev| {
                ev.fixed64(1, unix_nanos(e.timestamp));
                ev.string(2, &e.name);
                for kv in &e.attributes {
                    key_value(ev, 3, kv);
                }
                ev.uint(4, u64::from(e.dropped_attributes_count));
            });
        }
        m.uint(12, u64::from(s.events.dropped_count));
        for l in &s.links.links {
            m.message(13, |lk| {
                lk.bytes(1, &l.span_context.trace_id().to_bytes());
                lk.bytes(2, &l.span_context.span_id().to_bytes());
                lk.string(3, &l.span_context.trace_state().header());
                for kv in &l.attributes {
                    key_value(lk, 4, kv);
                }
                lk.uint(5, u64::from(l.dropped_attributes_count));
                lk.fixed32(
                    6,
                    span_flags(
                        l.span_context.trace_flags().to_u8(),
                        l.span_context.is_remote(),
                    ),
                );
            });
        }
        m.uint(14, u64::from(s.links.dropped_count));
        // Status { message = 2; code = 3 (UNSET 0, OK 1, ERROR 2) }.
        match &s.status {
            Status::Unset => {}
            Status::Ok => m.message(15, |st| st.uint(3, 1)),
            Status::Error { description } => m.message(15, |st| {
                st.string(2, description);
                st.uint(3, 2);
            }),
        }
        m.fixed32(
            16,
            span_flags(cx.trace_flags().to_u8(), s.parent_span_is_remote),
        );
    });
}

/// `InstrumentationScope { name = 1; version = 2; repeated KeyValue
/// attributes = 3 }`.
fn scope(pb: &mut Pb, field: u32, s: &InstrumentationScope) {
    pb.message(field, |m| {
        m.string(1, s.name());
        m.string(2, s.version().unwrap_or_default());
        for kv in s.attributes() {
            key_value(m, 3, kv);
        }
    });
}

/// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }`
/// with one `ResourceSpans { resource = 1; repeated ScopeSpans scope_spans =
/// 2 }` whose `ScopeSpans { scope = 1; repeated Span spans = 2; schema_url =
/// 3 }` group the batch by instrumentation scope, in the order met.
fn encode_request(resource: &[u8], batch: &[SpanData]) -> Vec<u8> {
    let mut scopes: Vec<(&InstrumentationScope, Vec<&SpanData>)> = Vec::new();
    for s in batch {
        match scopes
            .iter_mut()
            .find(|(sc, _)| *sc == &s.instrumentation_scope)
        {
            Some((_, v)) => v.push(s),
            None => scopes.push((&s.instrumentation_scope, vec![s])),
        }
    }
    let mut pb = Pb::default();
    pb.message(1, |rs| {
        rs.bytes(1, resource);
        for (sc, spans) in &scopes {
            rs.message(2, |ss| {
                scope(ss, 1, sc);
                for s in spans {
                    span(ss, 2, s);
                }
                ss.string(3, sc.schema_url().unwrap_or_default());
            });
        }
    });
    pb.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire bytes of a few fields, as protobuf defines them.
    #[test]
    fn protobuf_wire_format() {
        let mut pb = Pb::default();
        pb.varint(300);
        assert_eq!(pb.0, [0xac, 0x02]);
        let mut pb = Pb::default();
        key_value(&mut pb, 9, &KeyValue::new("seq", 150_i64));
        // field 9, LEN; KeyValue { key "seq"; value { int_value 150 } }
        assert_eq!(
            pb.0,
            [
                0x4a, 0x0a, 0x0a, 0x03, b's', b'e', b'q', 0x12, 0x03, 0x18, 0x96, 0x01
            ]
        );
        let mut pb = Pb::default();
        pb.int64(3, -1);
        assert_eq!(
            pb.0,
            [
                0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
            ]
        );
        let mut pb = Pb::default();
        pb.message(1, |m| m.message(2, |n| n.bool(2, false)));
        assert_eq!(pb.0, [0x0a, 0x04, 0x12, 0x02, 0x10, 0x00]);
        // A nested message longer than 127 bytes: a two-byte length.
        let mut pb = Pb::default();
        pb.message(1, |m| m.bytes(1, &[7; 200]));
        assert_eq!(&pb.0[..5], [0x0a, 0xcb, 0x01, 0x0a, 0xc8]);
        assert_eq!(pb.0.len(), 3 + 3 + 200);
        assert_eq!(span_flags(1, false), 0x101);
        assert_eq!(span_flags(1, true), 0x301);
    }
}

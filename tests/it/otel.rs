//! The OpenTelemetry export (a build with the cargo feature `otel`; README,
//! "Logs"): the real binary exports its `ingest` and `delivery` spans over
//! OTLP/HTTP to a local hyper server standing in for the collector
//! (`POST /v1/traces`), which records each request; the test decodes the protobuf
//! (`ExportTraceServiceRequest`) with its own reader of the wire format and
//! checks the spans' names and attributes, the resource's `service.name`, the
//! filter apart from `RUST_LOG`, the flush at shutdown, a collector that is not
//! there, and the settings refused by name.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::time::Duration;

use crate::relay::{Relay, run_cli, run_cli_env};
use crate::sink::{Reply, Req, Sink, until};

const LONG: Duration = Duration::from_secs(120);
const JSON: (&str, &str) = ("content-type", "application/json");
/// An ordering key that must never reach an exported span.
const SECRET_KEY: &str = "customer-4711@example.com";

// ---- the protobuf wire format -------------------------------------------

/// One field as it is on the wire.
#[derive(Clone, Debug)]
enum Wire {
    Varint(u64),
    Fixed64(u64),
    Len(Vec<u8>),
    Fixed32(u32),
}

/// The fields of one message, in order; panics on bytes that are not
/// protobuf.
fn fields(mut b: &[u8]) -> Vec<(u32, Wire)> {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (first, rest) = b.split_first().expect("a varint cut short");
            *b = rest;
            v |= u64::from(first & 0x7f) << shift;
            if first & 0x80 == 0 {
                return v;
            }
        }
        panic!("a varint longer than 10 bytes");
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        let field = u32::try_from(key >> 3).expect("field number");
        let value = match key & 7 {
            0 => Wire::Varint(varint(&mut b)),
            1 => {
                let (v, rest) = b.split_at(8);
                b = rest;
                Wire::Fixed64(u64::from_le_bytes(v.try_into().expect("8 bytes")))
            }
            2 => {
                let n = usize::try_from(varint(&mut b)).expect("length");
                assert!(
                    n <= b.len(),
                    "a length-delimited field runs past its message"
                );
                let (v, rest) = b.split_at(n);
                b = rest;
                Wire::Len(v.to_vec())
            }
            5 => {
                let (v, rest) = b.split_at(4);
                b = rest;
                Wire::Fixed32(u32::from_le_bytes(v.try_into().expect("4 bytes")))
            }
            w => panic!("wire type {w} of field {field}"),
        };
        out.push((field, value));
    }
    out
}

fn len(w: &Wire) -> &[u8] {
    match w {
        Wire::Len(b) => b,
        other => panic!("expected a length-delimited field, got {other:?}"),
    }
}

fn text(w: &Wire) -> String {
    String::from_utf8(len(w).to_vec()).expect("a string field that is UTF-8")
}

/// An `AnyValue`.
#[derive(Clone, Debug, PartialEq)]
enum Any {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
}

impl Any {
    fn str(&self) -> &str {
        match self {
            Any::Str(s) => s,
            other => panic!("expected a string, got {other:?}"),
        }
    }

    fn int(&self) -> i64 {
        match self {
            Any::Int(i) => *i,
            other => panic!("expected an int, got {other:?}"),
        }
    }
}

/// `repeated KeyValue` fields numbered `field` of `msg`, as a map.
fn attributes(msg: &[(u32, Wire)], field: u32) -> BTreeMap<String, Any> {
    let mut out = BTreeMap::new();
    for (_, kv) in msg.iter().filter(|(f, _)| *f == field) {
        let kv = fields(len(kv));
        let key = kv
            .iter()
            .find(|(f, _)| *f == 1)
            .map(|(_, w)| text(w))
            .expect("KeyValue.key");
        let value = kv
            .iter()
            .find(|(f, _)| *f == 2)
            .map(|(_, w)| fields(len(w)))
            .expect("KeyValue.value");
        let value = match value.as_slice() {
            [(1, w)] => Any::Str(text(w)),
            [(2, Wire::Varint(v))] => Any::Bool(*v != 0),
            [(3, Wire::Varint(v))] => Any::Int(*v as i64),
            [(4, Wire::Fixed64(v))] => Any::Double(f64::from_bits(*v)),
            other => panic!("AnyValue of {key}: {other:?}"),
        };
        assert!(
            out.insert(key.clone(), value).is_none(),
            "attribute {key} twice"
        );
    }
    out
}

/// One exported span.
#[derive(Debug)]
struct Span {
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent: Vec<u8>,
    name: String,
    kind: u64,
    start_ns: u64,
    end_ns: u64,
    attrs: BTreeMap<String, Any>,
    /// (name, attributes) of each event.
    events: Vec<(String, BTreeMap<String, Any>)>,
    flags: u32,
}

/// One `ExportTraceServiceRequest` as the collector received it.
#[derive(Debug)]
struct Export {
    resource: BTreeMap<String, Any>,
    /// (scope name, scope version, its spans).
    scopes: Vec<(String, String, Vec<Span>)>,
}

fn decode_span(b: &[u8]) -> Span {
    let m = fields(b);
    let one = |n: u32| m.iter().find(|(f, _)| *f == n).map(|(_, w)| w.clone());
    let fixed64 = |n: u32| match one(n) {
        Some(Wire::Fixed64(v)) => v,
        other => panic!("span field {n}: {other:?}"),
    };
    Span {
        trace_id: one(1).map(|w| len(&w).to_vec()).unwrap_or_default(),
        span_id: one(2).map(|w| len(&w).to_vec()).unwrap_or_default(),
        parent: one(4).map(|w| len(&w).to_vec()).unwrap_or_default(),
        name: one(5).map(|w| text(&w)).unwrap_or_default(),
        kind: match one(6) {
            Some(Wire::Varint(k)) => k,
            None => 0,
            other => panic!("span kind: {other:?}"),
        },
        start_ns: fixed64(7),
        end_ns: fixed64(8),
        attrs: attributes(&m, 9),
        events: m
            .iter()
            .filter(|(f, _)| *f == 11)
            .map(|(_, e)| {
                let e = fields(len(e));
                let name = e
                    .iter()
                    .find(|(f, _)| *f == 2)
                    .map(|(_, w)| text(w))
                    .unwrap_or_default();
                (name, attributes(&e, 3))
            })
            .collect(),
        flags: match one(16) {
            Some(Wire::Fixed32(f)) => f,
            other => panic!("span flags: {other:?}"),
        },
    }
}

fn decode(body: &[u8]) -> Export {
    let top = fields(body);
    assert_eq!(top.len(), 1, "one ResourceSpans per request: {top:?}");
    let rs = fields(len(&top[0].1));
    let resource = rs
        .iter()
        .find(|(f, _)| *f == 1)
        .map(|(_, w)| fields(len(w)))
        .expect("ResourceSpans.resource");
    let scopes = rs
        .iter()
        .filter(|(f, _)| *f == 2)
        .map(|(_, ss)| {
            let ss = fields(len(ss));
            let scope = ss
                .iter()
                .find(|(f, _)| *f == 1)
                .map(|(_, w)| fields(len(w)))
                .expect("ScopeSpans.scope");
            let field = |n: u32| {
                scope
                    .iter()
                    .find(|(f, _)| *f == n)
                    .map(|(_, w)| text(w))
                    .unwrap_or_default()
            };
            let spans = ss
                .iter()
                .filter(|(f, _)| *f == 2)
                .map(|(_, s)| decode_span(len(s)))
                .collect();
            (field(1), field(2), spans)
        })
        .collect();
    Export {
        resource: attributes(&resource, 1),
        scopes,
    }
}

/// Every span of every export the collector received, with the export it
/// came in; checks each request is an OTLP/HTTP protobuf POST.
fn received(collector: &Sink) -> Vec<(usize, Span)> {
    let mut out = Vec::new();
    for r in collector.requests() {
        check_request(&r);
        let e = decode(&r.body);
        for (_, _, spans) in e.scopes {
            out.extend(spans.into_iter().map(|s| (r.n, s)));
        }
    }
    out
}

fn check_request(r: &Req) {
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/traces"),
        "{r:?}"
    );
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/x-protobuf"),
        "{r:?}"
    );
}

fn named<'a>(spans: &'a [(usize, Span)], name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == name)
        .collect()
}

// ---- the relay ------------------------------------------------------------

/// One tenant, one source with an ordered HTTP sink keyed by `x-entity-id`;
/// `otel` is the node's `otel:` mapping (YAML flow) or empty. Fast retries,
/// a breaker that does not open.
fn template(sink: &Sink, otel: &str) -> String {
    let otel = if otel.is_empty() {
        String::new()
    } else {
        format!(", otel: {otel}")
    };
    format!(
        "node: {{data_dir: '{{DATA}}', store: memory{otel}}}
listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}'}}
retry: {{base_ms: 50, max_ms: 200}}
breaker: {{failures: 100000, open_ms: 10}}
tenants:
  - name: acme
sources:
  - name: orders
    tenant: acme
    sinks:
      - type: http
        name: web
        url: '{}'
        ordered: true
        ordering_key: {{header: x-entity-id}}
",
        sink.url()
    )
}

/// The export turned on by the standard variables alone
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`), the log lines at
/// `info`: each hook's `ingest` span (source, tenant, status 200, seq,
/// duration; its "hook accepted" event) and each attempt's `delivery` span
/// (sink kind and name, source, tenant, seq, attempt, ordered, outcome:
/// `retry` then `delivered` for the hook the receiver refused once,
/// duration) reach the collector with the service name; no span is in the
/// log and the ordering key is in no export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ingest_and_delivery_spans_reach_the_collector() {
    let collector = Sink::ok().await;
    let sink = Sink::start(|r| {
        if r.json()["i"] == 1 && r.attempt() == 1 {
            Reply::Status(503)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let endpoint = format!("http://{}", collector.addr);
    let relay = Relay::start_with_env(
        &template(&sink, ""),
        &[
            ("RUST_LOG", "info"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "relay-under-test"),
            // Export every 100 ms rather than every 5 s.
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    for i in 0..3 {
        let a = relay
            .post(
                "/hooks/orders",
                &[JSON, ("x-entity-id", SECRET_KEY)],
                format!("{{\"i\":{i}}}"),
            )
            .await;
        assert_eq!(a.status, 200, "{a:?}");
    }
    // Three first attempts and one retry; three requests.
    let spans = until(
        "three ingest and four delivery spans at the collector",
        LONG,
        async || {
            let s = received(&collector);
            (named(&s, "ingest").len() >= 3 && named(&s, "delivery").len() >= 4).then_some(s)
        },
    )
    .await;
    assert_eq!(sink.delivered().len(), 3, "{:?}", sink.requests());
    assert_eq!(spans.len(), 7, "{spans:#?}");

    for r in collector.requests() {
        let e = decode(&r.body);
        assert_eq!(
            e.resource["service.name"],
            Any::Str("relay-under-test".into()),
            "{e:?}"
        );
        assert_eq!(
            e.resource["service.version"],
            Any::Str(env!("CARGO_PKG_VERSION").into()),
            "{e:?}"
        );
        for (name, version, _) in &e.scopes {
            assert_eq!(
                (name.as_str(), version.as_str()),
                ("ankusa", env!("CARGO_PKG_VERSION"))
            );
        }
        let body = String::from_utf8_lossy(&r.body);
        assert!(
            !body.contains(SECRET_KEY),
            "the ordering key was exported: {e:?}"
        );
    }
    for (_, s) in &spans {
        assert_eq!(s.trace_id.len(), 16, "{s:?}");
        assert!(s.trace_id.iter().any(|b| *b != 0), "{s:?}");
        assert_eq!(s.span_id.len(), 8, "{s:?}");
        // Each span is the root of its own trace, sampled, internal.
        assert!(s.parent.is_empty(), "{s:?}");
        assert_eq!((s.kind, s.flags), (1, 0x101), "{s:?}");
        assert!(
            s.start_ns > 1_600_000_000_000_000_000 && s.start_ns <= s.end_ns,
            "{s:?}"
        );
    }

    let ingest = named(&spans, "ingest");
    let mut seqs = Vec::new();
    for s in &ingest {
        let a = &s.attrs;
        assert_eq!(
            a.keys().map(String::as_str).collect::<Vec<_>>(),
            ["duration_ms", "seq", "source", "status", "tenant"],
            "{s:?}"
        );
        assert_eq!(
            (a["source"].str(), a["tenant"].str(), a["status"].int()),
            ("orders", "acme", 200),
            "{s:?}"
        );
        assert!(
            matches!(a["duration_ms"], Any::Double(d) if d >= 0.0),
            "{s:?}"
        );
        seqs.push(a["seq"].int());
        // The debug event inside the span is one of its events (its seq a
        // u64 field, which tracing-opentelemetry exports as text).
        let accepted: Vec<_> = s
            .events
            .iter()
            .filter(|(n, _)| n == "hook accepted")
            .collect();
        assert_eq!(accepted.len(), 1, "{s:?}");
        assert_eq!(
            accepted[0].1["seq"],
            Any::Str(a["seq"].int().to_string()),
            "{s:?}"
        );
    }
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 3, "{seqs:?}");

    let delivery = named(&spans, "delivery");
    let mut attempts = Vec::new();
    for s in &delivery {
        let a = &s.attrs;
        assert_eq!(
            a.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "attempt",
                "duration_ms",
                "ordered",
                "outcome",
                "seq",
                "sink",
                "sink_kind",
                "source",
                "tenant"
            ],
            "{s:?}"
        );
        assert_eq!(
            (
                a["sink_kind"].str(),
                a["sink"].str(),
                a["source"].str(),
                a["tenant"].str()
            ),
            ("http", "web", "orders", "acme"),
            "{s:?}"
        );
        assert_eq!(a["ordered"], Any::Bool(true), "{s:?}");
        assert!(
            matches!(a["duration_ms"], Any::Double(d) if d >= 0.0),
            "{s:?}"
        );
        attempts.push((
            a["seq"].int(),
            a["attempt"].int(),
            a["outcome"].str().to_owned(),
        ));
    }
    let of = |seq: i64| {
        let mut v: Vec<(i64, &str)> = attempts
            .iter()
            .filter(|a| a.0 == seq)
            .map(|a| (a.1, a.2.as_str()))
            .collect();
        v.sort_unstable();
        v
    };
    let refused = seqs[1];
    assert_eq!(of(seqs[0]), [(1, "delivered")], "{attempts:?}");
    assert_eq!(
        of(refused),
        [(1, "retry"), (2, "delivered")],
        "{attempts:?}"
    );
    assert_eq!(of(seqs[2]), [(1, "delivered")], "{attempts:?}");

    // The log lines keep RUST_LOG=info: no span in them, the export's
    // start-up line and no export failure.
    let log = relay.log();
    assert!(
        !log.contains("ingest{") && !log.contains("delivery{") && !log.contains("hook accepted"),
        "{log}"
    );
    assert!(log.contains(&format!("OTel export of spans (ankusa=debug) to {endpoint}/v1/traces (OTEL_EXPORTER_OTLP_ENDPOINT) as service relay-under-test")), "{log}");
    assert!(!log.contains("OTel export to"), "{log}");
}

/// `node.otel` wins over the variables (endpoint, service name), its filter
/// exports only what it names (`ankusa_pipeline=debug`: the delivery span,
/// not the ingest span), and the spans still queued when the relay stops
/// (an export only every hour) are flushed by the shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_wins_and_shutdown_flushes_what_is_queued() {
    let collector = Sink::ok().await;
    let sink = Sink::ok().await;
    let otel = format!(
        "{{endpoint: 'http://{}', service_name: from-file, filter: 'ankusa_pipeline=debug'}}",
        collector.addr
    );
    let mut relay = Relay::start_with_env(
        &template(&sink, &otel),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_BSP_SCHEDULE_DELAY", "3600000"),
        ],
    )
    .await;
    relay
        .post("/hooks/orders", &[JSON, ("x-entity-id", "k")], "{\"i\":0}")
        .await
        .id();
    until("the hook delivered", LONG, async || {
        (sink.delivered().len() == 1).then_some(())
    })
    .await;
    // Nothing exports before the hour is up (or 512 spans are queued).
    assert_eq!(collector.request_count(), 0, "{:?}", collector.requests());
    relay.sigterm();
    let status = relay.wait_exit(LONG).await;
    assert!(status.success(), "{status:?}\n{}", relay.log());
    let requests = collector.requests();
    assert_eq!(requests.len(), 1, "{requests:?}\n{}", relay.log());
    check_request(&requests[0]);
    let e = decode(&requests[0].body);
    assert_eq!(
        e.resource["service.name"],
        Any::Str("from-file".into()),
        "{e:?}"
    );
    let spans: Vec<&Span> = e.scopes.iter().flat_map(|(_, _, s)| s).collect();
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0].name, "delivery");
    assert_eq!(spans[0].attrs["outcome"], Any::Str("delivered".into()));
    assert_eq!(spans[0].attrs["attempt"], Any::Int(1));
    let log = relay.log();
    assert!(
        log.contains(&format!(
            "to http://{}/v1/traces (node.otel.endpoint) as service from-file",
            collector.addr
        )),
        "{log}"
    );
}

/// A collector that is not there (a closed port): every hook is still taken
/// and delivered, the log says once that the export fails and spans are
/// dropped, and the relay still stops cleanly (its flush fails fast).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_costs_a_warning_and_the_spans() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let sink = Sink::ok().await;
    let endpoint = format!("http://{closed}");
    let mut relay = Relay::start_with_env(
        &template(&sink, ""),
        &[
            ("RUST_LOG", "info"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    for i in 0..5 {
        let a = relay
            .post(
                "/hooks/orders",
                &[JSON, ("x-entity-id", "k")],
                format!("{{\"i\":{i}}}"),
            )
            .await;
        assert_eq!(a.status, 200, "{a:?}");
    }
    until("the five hooks delivered", LONG, async || {
        (sink.delivered().len() == 5).then_some(())
    })
    .await;
    let warning = format!("OTel export to {endpoint}/v1/traces failed (");
    let log = until("the export's warning", LONG, async || {
        let log = relay.log();
        log.contains(&warning).then_some(log)
    })
    .await;
    let line = log
        .lines()
        .find(|l| l.contains(&warning))
        .unwrap_or_default();
    assert!(
        line.contains("WARN") && line.contains("spans dropped"),
        "{line}"
    );
    relay.sigterm();
    let status = relay.wait_exit(LONG).await;
    assert!(status.success(), "{status:?}\n{}", relay.log());
    assert!(relay.log().contains("stopped cleanly"), "{}", relay.log());
}

/// A collector that takes the connection and never answers (every export
/// held open until the exporter's timeout), with a queue of 4 spans that
/// is full at once: ingest never waits on it (every hook acknowledged 200
/// and delivered while the exports hang and spans are dropped), the log
/// says why, and the relay still stops cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_holds_up_neither_ingest_nor_the_stop() {
    let collector = Sink::start(|_| Reply::Hold).await;
    let sink = Sink::ok().await;
    let endpoint = format!("http://{}", collector.addr);
    let mut relay = Relay::start_with_env(
        &template(&sink, ""),
        &[
            ("RUST_LOG", "info"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
        ],
    )
    .await;
    until("an export held by the collector", LONG, async || {
        relay
            .post(
                "/hooks/orders",
                &[JSON, ("x-entity-id", "k")],
                "{\"warm\":1}",
            )
            .await
            .id();
        (collector.request_count() > 0).then_some(())
    })
    .await;
    for i in 0..20 {
        let a = relay
            .post(
                "/hooks/orders",
                &[JSON, ("x-entity-id", "k")],
                format!("{{\"i\":{i}}}"),
            )
            .await;
        assert_eq!(a.status, 200, "{a:?}");
    }
    until("the twenty hooks delivered", LONG, async || {
        (sink
            .delivered()
            .iter()
            .filter(|r| r.json()["i"].is_number())
            .count()
            == 20)
            .then_some(())
    })
    .await;
    let warning =
        format!("OTel export to {endpoint}/v1/traces failed (no answer within the timeout)");
    until("the export's warning", LONG, async || {
        relay.log().contains(&warning).then_some(())
    })
    .await;
    relay.sigterm();
    let status = relay.wait_exit(LONG).await;
    assert!(status.success(), "{status:?}\n{}", relay.log());
    assert!(relay.log().contains("stopped cleanly"), "{}", relay.log());
}

/// Regression (brk16): the exporter read a collector's 2xx answer whole
/// (`bytes()`), so a collector (or whatever answers at its address) that
/// streams an endless body made the relay buffer it until the timeout,
/// gigabytes on loopback. It reads at most 64 KiB of it now and drops the
/// connection: the collector below, answering 200 with a 1 GiB body, is cut
/// off after a few megabytes (what the sockets' buffers hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_answer_that_never_ends_is_not_read_whole() {
    use std::io::{BufRead, BufReader, Read, Write};
    const BODY: u64 = 1 << 30;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    // The first export's connection: its request read, then 200 and the body
    // until the relay stops reading (a write fails) or all of it is sent.
    let streamer = std::thread::spawn(move || -> u64 {
        let (stream, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).expect("request") == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().expect("content-length");
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).expect("the export's body");
        let mut out = stream;
        out.write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {BODY}\r\n\r\n").as_bytes()).expect("head");
        let piece = vec![0u8; 1 << 20];
        let mut written = 0u64;
        while written < BODY && out.write_all(&piece).is_ok() {
            written += piece.len() as u64;
        }
        written
    });
    let sink = Sink::ok().await;
    let endpoint = format!("http://{addr}");
    let mut relay = Relay::start_with_env(
        &template(&sink, ""),
        &[
            ("RUST_LOG", "info"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "600000"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    )
    .await;
    relay
        .post("/hooks/orders", &[JSON, ("x-entity-id", "k")], "{\"i\":0}")
        .await
        .id();
    until("the collector's answer cut off", LONG, async || {
        streamer.is_finished().then_some(())
    })
    .await;
    let written = streamer.join().expect("the collector thread");
    assert!(
        written < 256 << 20,
        "the relay read {} MiB of the collector's answer",
        written >> 20
    );
    until("the hook delivered", LONG, async || {
        (sink.delivered().len() == 1).then_some(())
    })
    .await;
    relay.sigterm();
    let status = relay.wait_exit(LONG).await;
    assert!(status.success(), "{status:?}\n{}", relay.log());
}

/// Settings the export cannot run with are refused by name: a filter that
/// does not parse (`check-config`, exit 2), a protocol this build does not
/// speak and a batch processor's queue of 0 (`serve`, exit 2, before it
/// opens the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_the_export_cannot_run_with_are_refused_by_name() {
    let sink = Sink::ok().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = template(&sink, "{filter: 'ankusa=loud'}")
        .replace("{DATA}", &dir.path().join("data").display().to_string())
        .replace("{INGEST}", "127.0.0.1:0")
        .replace("{ADMIN}", "127.0.0.1:0");
    let file = dir.path().join("relay.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir.path());
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains("node: option \"otel.filter\": \"ankusa=loud\" does not parse: "),
        "{out}"
    );

    std::fs::write(&file, yaml.replace(", otel: {filter: 'ankusa=loud'}", "")).expect("write");
    let (status, out) = run_cli_env(
        &[
            OsStr::new("serve"),
            OsStr::new("--config"),
            file.as_os_str(),
        ],
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    );
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: this build exports OTLP over HTTP with protobuf only (http/protobuf, the collector's port 4318)"),
        "{out}"
    );
    assert!(
        !dir.path().join("data").exists(),
        "the store was created: {out}"
    );

    // Regression (brk16): a queue of 0 spans panicked in the SDK at start
    // ("mpsc bounded channel requires buffer > 0", exit 101).
    let (status, out) = run_cli_env(
        &[
            OsStr::new("serve"),
            OsStr::new("--config"),
            file.as_os_str(),
        ],
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
        ],
    );
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(out.contains("OTEL_BSP_MAX_QUEUE_SIZE=0: expected the spans queued at most, a whole number from 1 to 1048576"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

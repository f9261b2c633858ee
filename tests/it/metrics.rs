//! `/metrics` (README, "What to watch") through the real binary: a scripted run
//! moves every counter and histogram by a known amount (ingest by source and
//! code, a lane head that retries with members behind it, a dead letter, a
//! keyless hook, a breaker that opens, a file sink beside the http ones), and
//! the whole exposition parses with a strict OpenMetrics text parser (below);
//! then 1,000 keys over 50 tenants add no series (ADR 0004 section 7: no label
//! from a key, a tenant or a lane).
//!
//! No timing assertion: the receiver holds the lane head's first attempt
//! until its members are queued, the dead receiver's Retry-After puts its
//! rows' next attempts 10 minutes out, and every value is waited for (all
//! of them final) before it is asserted exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::relay::{Relay, client, config};
use crate::sink::{Reply, Sink, until};

const LONG: Duration = Duration::from_secs(120);

/// One sample of the exposition: metric name, labels in order, value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) value: f64,
}

impl Sample {
    /// `name{a="x",b="y"}`, the labels in the order given.
    fn id(&self) -> String {
        if self.labels.is_empty() {
            return self.name.clone();
        }
        let l: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect();
        format!("{}{{{}}}", self.name, l.join(","))
    }
}

/// A family's `# TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
    Info,
}

/// A strict parser of the OpenMetrics text format as prometheus-client
/// writes it (OpenMetrics 1.0, section "Text format"): every family has
/// `# HELP` then `# TYPE` before its samples, each sample's name is the
/// family's with the suffix its type allows (`_total` for a counter,
/// `_bucket`/`_sum`/`_count` for a histogram, `_info` for an info, none for a
/// gauge), label values are quoted with escapes, values are floats, a
/// histogram's buckets are cumulative, end at `le="+Inf"` and equal its
/// `_count`, and the text ends with `# EOF`. Any other line is a panic that
/// names it.
pub(crate) fn parse(text: &str) -> (BTreeMap<String, Kind>, Vec<Sample>) {
    let mut families: BTreeMap<String, Kind> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut current: Option<(String, Option<Kind>)> = None;
    let mut eof = false;
    for line in text.lines() {
        assert!(!eof, "a line after # EOF: {line:?}");
        if line == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("HELP without text: {line:?}"));
            assert!(valid_name(name), "bad family name in {line:?}");
            assert!(!help.trim().is_empty(), "empty HELP: {line:?}");
            assert!(!families.contains_key(name), "family {name} twice");
            current = Some((name.to_owned(), None));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("TYPE without a type: {line:?}"));
            let Some((family, None)) = &current else {
                panic!("TYPE without its HELP before: {line:?}")
            };
            assert_eq!(name, family, "TYPE of another family than its HELP");
            let kind = match kind {
                "counter" => Kind::Counter,
                "gauge" => Kind::Gauge,
                "histogram" => Kind::Histogram,
                "info" => Kind::Info,
                other => panic!("unexpected type {other} in {line:?}"),
            };
            families.insert(name.to_owned(), kind);
            current = Some((name.to_owned(), Some(kind)));
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment {line:?}");
        let Some((family, Some(kind))) = &current else {
            panic!("a sample before any family: {line:?}")
        };
        let s = parse_sample(line);
        let suffix = s
            .name
            .strip_prefix(family.as_str())
            .unwrap_or_else(|| panic!("sample {line:?} outside family {family}"));
        let allowed: &[&str] = match kind {
            Kind::Counter => &["_total"],
            Kind::Gauge => &[""],
            Kind::Histogram => &["_bucket", "_sum", "_count"],
            Kind::Info => &["_info"],
        };
        assert!(
            allowed.contains(&suffix),
            "sample {line:?}: suffix {suffix:?} not allowed for a {kind:?}"
        );
        match (kind, suffix) {
            (Kind::Counter | Kind::Histogram, "_total" | "_count" | "_bucket") => {
                assert!(
                    s.value >= 0.0 && s.value.fract() == 0.0,
                    "a count that is not a whole number: {line:?}"
                )
            }
            (Kind::Info, _) => assert_eq!(s.value, 1.0, "an info sample is 1: {line:?}"),
            _ => assert!(s.value.is_finite(), "{line:?}"),
        }
        samples.push(s);
    }
    assert!(eof, "no # EOF at the end");
    check_histograms(&families, &samples);
    (families, samples)
}

fn valid_name(n: &str) -> bool {
    n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `name{label="value",...} value` (labels optional, values escaped).
fn parse_sample(line: &str) -> Sample {
    let name_end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("no value in {line:?}"));
    let name = &line[..name_end];
    assert!(valid_name(name), "bad sample name in {line:?}");
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices().peekable();
        loop {
            let (start, c) = chars
                .next()
                .unwrap_or_else(|| panic!("unterminated labels in {line:?}"));
            if c == '}' {
                rest = &r[start + 1..];
                break;
            }
            let eq = r[start..]
                .find("=\"")
                .unwrap_or_else(|| panic!("label without =\" in {line:?}"))
                + start;
            let key = &r[start..eq];
            assert!(
                valid_name(key) && !key.contains(':'),
                "bad label name {key:?} in {line:?}"
            );
            while chars.peek().is_some_and(|(i, _)| *i < eq + 2) {
                chars.next();
            }
            let mut value = String::new();
            loop {
                let (_, c) = chars
                    .next()
                    .unwrap_or_else(|| panic!("unterminated label value in {line:?}"));
                match c {
                    '"' => break,
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => panic!("bad escape {other:?} in {line:?}"),
                    },
                    '\n' => panic!("newline in a label value: {line:?}"),
                    c => value.push(c),
                }
            }
            assert!(
                !labels.iter().any(|(k, _): &(String, String)| k == key),
                "label {key} twice in {line:?}"
            );
            labels.push((key.to_owned(), value));
            match chars.peek() {
                Some((_, ',')) => {
                    chars.next();
                }
                Some((_, '}')) => {}
                other => panic!("expected , or }} after a label, got {other:?} in {line:?}"),
            }
        }
    }
    let value = rest
        .strip_prefix(' ')
        .unwrap_or_else(|| panic!("no space before the value in {line:?}"));
    assert!(
        !value.contains(' '),
        "a timestamp or exemplar where none is written: {line:?}"
    );
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("value {v:?} is not a number in {line:?}")),
    };
    Sample {
        name: name.to_owned(),
        labels,
        value,
    }
}

/// One histogram series: its buckets (upper bound, cumulative count) in
/// order, its count and its sum.
type HistogramSeries = (Vec<(f64, f64)>, Option<f64>, Option<f64>);

/// Every histogram series: buckets ascending and cumulative, the last
/// `le="+Inf"` equal to its `_count`, a `_sum`.
fn check_histograms(families: &BTreeMap<String, Kind>, samples: &[Sample]) {
    for (family, kind) in families {
        if *kind != Kind::Histogram {
            continue;
        }
        // Per label set (without le): the buckets in order, the count, the sum.
        let mut series: BTreeMap<String, HistogramSeries> = BTreeMap::new();
        let of_family = |s: &&Sample| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .any(|x| s.name.strip_prefix(family.as_str()) == Some(*x))
        };
        for s in samples.iter().filter(of_family) {
            let mut labels = s.labels.clone();
            let le = labels
                .iter()
                .position(|(k, _)| k == "le")
                .map(|i| labels.remove(i).1);
            let key = format!("{labels:?}");
            let e = series.entry(key).or_default();
            match &s.name[family.len()..] {
                "_bucket" => {
                    let le = le.unwrap_or_else(|| panic!("a bucket without le: {s:?}"));
                    let bound = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap_or_else(|_| panic!("bad le {le}"))
                    };
                    e.0.push((bound, s.value));
                }
                "_count" => e.1 = Some(s.value),
                "_sum" => e.2 = Some(s.value),
                other => panic!("{other}"),
            }
        }
        assert!(!series.is_empty(), "histogram {family} has no series");
        for (labels, (buckets, count, sum)) in series {
            assert!(
                buckets
                    .windows(2)
                    .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                "{family}{labels}: buckets not ascending and cumulative: {buckets:?}"
            );
            assert_eq!(
                buckets.last().map(|b| b.0),
                Some(f64::INFINITY),
                "{family}{labels}: no +Inf bucket"
            );
            assert_eq!(
                buckets.last().map(|b| b.1),
                count,
                "{family}{labels}: +Inf bucket is not the count"
            );
            assert!(sum.is_some_and(|s| s >= 0.0), "{family}{labels}: no _sum");
        }
    }
}

pub(crate) async fn scrape(relay: &Relay) -> String {
    client()
        .get(format!("http://{}/metrics", relay.admin))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body")
}

/// The samples by [`Sample::id`].
fn by_id(samples: &[Sample]) -> BTreeMap<String, f64> {
    samples.iter().map(|s| (s.id(), s.value)).collect()
}

/// The scripted run, every figure it moves asserted exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_run_moves_every_figure_by_what_it_did() {
    // The ordered receiver: hook n=1 of lane k1 is held on its first attempt
    // (until its members are queued) and refused with 503 on its first two;
    // key `bad` is refused for good (422); everything else is delivered.
    let ordered = Sink::start(|r| {
        let n = r.json()["n"].as_u64().unwrap_or(0);
        match (r.key().as_deref(), n, r.attempt()) {
            (Some("bad"), _, _) => Reply::Status(422),
            (Some("k1"), 1, 1) => Reply::HoldThen(503),
            (Some("k1"), 1, 2) => Reply::Status(503),
            _ => Reply::Status(200),
        }
    })
    .await;
    // The dead receiver: 503, come back in 10 minutes (each of its rows is
    // attempted exactly once in this test; two rows open the breaker).
    let dead = Sink::start(|_| Reply::RetryAfter(503, "600")).await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 2, open_ms: 3600000}}
sources:
  - name: orders
    sinks: [{{type: http, url: '{}', ordered: true, ordering_key: {{header: x-entity-id}}}}]
  - name: dead
    sinks: [{{type: http, url: '{}', retry: {{base_ms: 3600000, max_ms: 3600000}}}}]
  - name: files
    sinks: [{{type: file, name: log, path: '{{DIR}}/deliveries.ndjson'}}]
",
            ordered.url(),
            dead.url()
        ),
    ))
    .await;

    let mut body_bytes = 0usize;
    let mut post = async |path: &str, key: Option<&str>, body: String| {
        body_bytes += body.len();
        let headers: Vec<(&str, &str)> = key.map(|k| ("x-entity-id", k)).into_iter().collect();
        relay.post(path, &headers, body).await.id();
    };
    // Lane k1: its head (n=1), held at the receiver, then two members.
    post("/hooks/orders", Some("k1"), r#"{"n":1}"#.into()).await;
    until("k1's head at the receiver", LONG, async || {
        (ordered.request_count() == 1).then_some(())
    })
    .await;
    post("/hooks/orders", Some("k1"), r#"{"n":2}"#.into()).await;
    post(
        "/hooks/orders",
        Some("k1"),
        r#"{"n":3,"pad":"members wait behind their head"}"#.into(),
    )
    .await;
    until("two members behind k1's head", LONG, async || {
        (relay.metrics().await.get("ankusa_dispatch_lane_members") == Some(&2.0)).then_some(())
    })
    .await;
    ordered.release();
    // Lane k2, a keyless hook (the keyless lane) and one refused for good.
    post("/hooks/orders", Some("k2"), r#"{"n":4}"#.into()).await;
    post("/hooks/orders", Some("k2"), r#"{"n":5}"#.into()).await;
    post("/hooks/orders", None, r#"{"n":6,"keyless":true}"#.into()).await;
    post("/hooks/orders", Some("bad"), r#"{"n":7}"#.into()).await;
    // Two rows of the dead receiver: two failures from two rows open its breaker.
    post("/hooks/dead", None, r#"{"n":8}"#.into()).await;
    post("/hooks/dead", None, r#"{"n":9}"#.into()).await;
    // Three hooks for the file sink.
    for n in 10..13 {
        post("/hooks/files", None, format!(r#"{{"n":{n}}}"#)).await;
    }
    // A path no source has (404) and a GET of a source (405): no body read.
    let c = client();
    let r = c
        .post(relay.url("/hooks/nobody"))
        .body("{}")
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 404);
    let r = c.get(relay.url("/hooks/orders")).send().await.expect("GET");
    assert_eq!(r.status(), 405);
    let hooks = 12.0;

    // Everything this run does, once it has all settled (each value final).
    let expected: BTreeMap<&str, f64> = [
        (
            r#"ankusa_ingest_requests_total{source="orders",code="200"}"#,
            7.0,
        ),
        (
            r#"ankusa_ingest_requests_total{source="orders",code="405"}"#,
            1.0,
        ),
        (
            r#"ankusa_ingest_requests_total{source="dead",code="200"}"#,
            2.0,
        ),
        (
            r#"ankusa_ingest_requests_total{source="files",code="200"}"#,
            3.0,
        ),
        (
            r#"ankusa_ingest_requests_total{source="_none",code="404"}"#,
            1.0,
        ),
        ("ankusa_ingest_accepted_total", hooks),
        ("ankusa_ingest_ack_seconds_count", hooks),
        ("ankusa_ingest_body_bytes_count", hooks),
        ("ankusa_ingest_body_bytes_sum", body_bytes as f64),
        ("ankusa_writer_group_hooks_sum", hooks),
        // Attempts: k1's head failed twice then delivered, 6 of orders'
        // hooks delivered, `bad` refused for good, each dead row once.
        (
            r#"ankusa_dispatch_attempts_total{sink="http",outcome="delivered"}"#,
            6.0,
        ),
        (
            r#"ankusa_dispatch_attempts_total{sink="http",outcome="retry"}"#,
            4.0,
        ),
        (
            r#"ankusa_dispatch_attempts_total{sink="http",outcome="permanent"}"#,
            1.0,
        ),
        (
            r#"ankusa_dispatch_attempts_total{sink="http",outcome="horizon_passed"}"#,
            0.0,
        ),
        (
            r#"ankusa_dispatch_attempts_total{sink="http",outcome="sink_gone"}"#,
            0.0,
        ),
        (
            r#"ankusa_dispatch_attempts_total{sink="http",outcome="source_gone"}"#,
            0.0,
        ),
        (
            r#"ankusa_dispatch_attempts_total{sink="http",outcome="retired"}"#,
            0.0,
        ),
        (
            r#"ankusa_dispatch_attempts_total{sink="file",outcome="delivered"}"#,
            3.0,
        ),
        (
            r#"ankusa_dispatch_attempts_total{sink="file",outcome="retry"}"#,
            0.0,
        ),
        (
            r#"ankusa_dispatch_attempts_total{sink="file",outcome="permanent"}"#,
            0.0,
        ),
        (r#"ankusa_dispatch_call_seconds_count{sink="http"}"#, 11.0),
        (r#"ankusa_dispatch_call_seconds_count{sink="file"}"#, 3.0),
        (
            r#"ankusa_dispatch_ingest_to_delivery_seconds_count{sink="http"}"#,
            6.0,
        ),
        (
            r#"ankusa_dispatch_ingest_to_delivery_seconds_count{sink="file"}"#,
            3.0,
        ),
        (r#"ankusa_dispatch_breakers{sink="http",state="open"}"#, 1.0),
        (
            r#"ankusa_dispatch_breakers{sink="http",state="half_open"}"#,
            0.0,
        ),
        (r#"ankusa_dispatch_breakers{sink="file",state="open"}"#, 0.0),
        (
            r#"ankusa_dispatch_breakers{sink="file",state="half_open"}"#,
            0.0,
        ),
        // The maintained counters the same run moves.
        ("ankusa_dispatch_delivered_total", 9.0),
        ("ankusa_dispatch_retries_total", 4.0),
        ("ankusa_dispatch_dead_lettered_total", 1.0),
        ("ankusa_dlq_dead", 1.0),
        ("ankusa_queue_pending", 2.0),
        ("ankusa_dispatch_in_flight", 0.0),
        ("ankusa_dispatch_lanes", 0.0),
        ("ankusa_dispatch_lane_members", 0.0),
        (
            r#"ankusa_dispatch_lane_key_missing_total{sink="http"}"#,
            1.0,
        ),
        // The dead rows are due in 10 minutes: nothing is due now.
        ("ankusa_dispatch_oldest_due_age_seconds", 0.0),
    ]
    .into_iter()
    .collect();
    let build = format!(
        r#"ankusa_build_info{{version="{}"}}"#,
        env!("CARGO_PKG_VERSION")
    );
    let mut expected = expected;
    expected.insert(build.as_str(), 1.0);
    let (families, samples) = until("every figure of the run", LONG, async || {
        let (families, samples) = parse(&scrape(&relay).await);
        let got = by_id(&samples);
        expected
            .iter()
            .all(|(id, v)| got.get(*id) == Some(v))
            .then_some((families, samples))
    })
    .await;
    let got = by_id(&samples);
    for (id, v) in &expected {
        assert_eq!(got.get(*id), Some(v), "{id}");
    }
    // One commit-latency observation per group written, of which there are
    // at most as many as hooks.
    let groups = got["ankusa_writer_group_hooks_count"];
    assert!((1.0..=hooks).contains(&groups), "{groups}");
    assert_eq!(got["ankusa_writer_commit_seconds_count"], groups);
    // Requests by code are the only ones with those labels: nothing else
    // answered.
    let requests: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == "ankusa_ingest_requests_total")
        .collect();
    assert_eq!(requests.len(), 5, "{requests:?}");
    // Each of these families is there with its type and its HELP.
    for (name, kind) in [
        ("ankusa_ingest_requests", Kind::Counter),
        ("ankusa_ingest_ack_seconds", Kind::Histogram),
        ("ankusa_ingest_body_bytes", Kind::Histogram),
        ("ankusa_dispatch_attempts", Kind::Counter),
        ("ankusa_dispatch_call_seconds", Kind::Histogram),
        (
            "ankusa_dispatch_ingest_to_delivery_seconds",
            Kind::Histogram,
        ),
        ("ankusa_dispatch_breakers", Kind::Gauge),
        ("ankusa_dispatch_oldest_due_age_seconds", Kind::Gauge),
        ("ankusa_writer_group_hooks", Kind::Histogram),
        ("ankusa_writer_commit_seconds", Kind::Histogram),
        ("ankusa_engine_gets", Kind::Counter),
        ("ankusa_engine_seeks", Kind::Counter),
        ("ankusa_engine_entries_scanned", Kind::Counter),
        ("ankusa_engine_batches", Kind::Counter),
        ("ankusa_engine_written_bytes", Kind::Counter),
        ("ankusa_build", Kind::Info),
    ] {
        assert_eq!(families.get(name), Some(&kind), "{name}");
    }
    // The engine counted the run's commits.
    assert!(got["ankusa_engine_batches_total"] >= groups, "{got:?}");
    // The receivers saw what the figures say.
    assert_eq!(ordered.delivered().len(), 6);
    assert_eq!(dead.request_count(), 2);
}

/// 1,000 ordering keys over 50 tenants add no series: the exposition after
/// them has exactly the series it had after a first few hooks of the same
/// kinds (ADR 0004 section 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_keys_and_fifty_tenants_add_no_series() {
    let sink = Sink::ok().await;
    let tenants: Vec<String> = (0..50).map(|t| format!("t{t}")).collect();
    let list: Vec<String> = tenants.iter().map(|t| format!("{{name: {t}}}")).collect();
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
tenants: [{}]
sources:
  - name: s
    tenant_path: true
    sinks: [{{type: http, url: '{}', ordered: true, ordering_key: {{header: x-entity-id}}}}]
",
            list.join(", "),
            sink.url()
        ),
    ))
    .await;
    let series =
        |text: &str| -> BTreeSet<String> { parse(text).1.iter().map(Sample::id).collect() };
    let delivered = async |n: f64| {
        until("the hooks delivered", LONG, async || {
            let m = relay.metrics().await;
            (m.get("ankusa_dispatch_delivered_total") == Some(&n)
                && m.get("ankusa_dispatch_in_flight") == Some(&0.0))
            .then_some(())
        })
        .await;
    };
    // A first few hooks: one tenant, two keys.
    for k in ["a", "b"] {
        relay
            .post(
                "/hooks/s/t0",
                &[("x-entity-id", k)],
                format!(r#"{{"k":"{k}"}}"#),
            )
            .await
            .id();
    }
    delivered(2.0).await;
    let before = series(&scrape(&relay).await);

    // 1,000 keys spread over the 50 tenants, four senders at once.
    let relay = &relay;
    let sends = (0..4).map(|w| async move {
        for i in (w..1000).step_by(4) {
            let t = format!("t{}", i % 50);
            let key = format!("key-{i}");
            relay
                .post(
                    &format!("/hooks/s/{t}"),
                    &[("x-entity-id", &key)],
                    format!(r#"{{"i":{i}}}"#),
                )
                .await
                .id();
        }
    });
    futures_util::future::join_all(sends).await;
    delivered(1002.0).await;
    let after = series(&scrape(relay).await);
    assert_eq!(
        before,
        after,
        "series added: {:?}; gone: {:?}",
        after.difference(&before).collect::<Vec<_>>(),
        before.difference(&after).collect::<Vec<_>>()
    );
    assert_eq!(sink.delivered().len(), 1002);
    // Nothing in the exposition names a tenant or a key.
    let text = scrape(relay).await;
    assert!(
        !text.contains("key-") && !text.contains("\"t1\""),
        "a key or tenant in /metrics"
    );
}

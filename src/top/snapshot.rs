//! One reading of a running relay, as `ankusa top` takes it every refresh:
//! the answers of `GET /v1/tenants` and `GET /v1/sources` (docs/design.md
//! section 5, "Admin API") and the text of `/metrics` (README, "What to
//! watch"), parsed. Pure: no I/O, no clock; [`Snapshot::parse`] is given the
//! three texts and returns a typed error for anything it cannot read.

use std::fmt;

use ankusa_admin::api_types::{SourceList, TenantList};

/// Why a text of the relay could not be read: which document, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

/// One sample of the exposition: the sample's name (with its suffix:
/// `ankusa_ingest_requests_total`), its labels in the order written, its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample name, e.g. `ankusa_dispatch_attempts_total`.
    pub name: String,
    /// `(label, value)` pairs, unescaped, in the order written.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf`, `-Inf` and `NaN` included).
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of one `/metrics` text, in the order written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metrics {
    /// Every sample line.
    pub samples: Vec<Sample>,
}

impl Metrics {
    /// Parses the text exposition: OpenMetrics 1.0 text as the relay writes
    /// it (prometheus-client), and the Prometheus 0.0.4 text format (blank
    /// lines, free comments, no `# EOF`). `# HELP`, `# TYPE`, `# UNIT` and
    /// other comments are skipped; a sample is `name{label="value",...} value`
    /// with an optional timestamp and exemplar, which are ignored. Label
    /// values are unescaped (`\\`, `\"`, `\n`).
    ///
    /// # Errors
    ///
    /// [`ParseError`] naming the line (1-based) and what is wrong: a bad
    /// metric or label name, an unterminated label value, a bad escape, a
    /// value that is not a number, a line after `# EOF`.
    pub fn parse(text: &str) -> Result<Metrics, ParseError> {
        let mut samples = Vec::new();
        let mut eof = false;
        for (i, line) in text.lines().enumerate() {
            let err = |what: String| {
                ParseError(format!(
                    "/metrics line {}: {}: {:?}",
                    i + 1,
                    clip(&what),
                    clip(line)
                ))
            };
            if eof {
                return Err(err("a line after # EOF".into()));
            }
            if line == "# EOF" {
                eof = true;
                continue;
            }
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            samples.push(parse_sample(line).map_err(err)?);
        }
        Ok(Metrics { samples })
    }

    /// The samples named `name` whose labels include every pair of `filter`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        filter: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples
            .iter()
            .filter(move |s| s.name == name && filter.iter().all(|(k, v)| s.label(k) == Some(*v)))
    }

    /// The sum of the samples named `name` whose labels include every pair
    /// of `filter`; `None` when there is no such sample.
    pub fn sum(&self, name: &str, filter: &[(&str, &str)]) -> Option<f64> {
        self.matching(name, filter)
            .map(|s| s.value)
            .reduce(|a, b| a + b)
    }

    /// The value of an unlabelled sample (a node gauge or counter).
    pub fn value(&self, name: &str) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels.is_empty())
            .map(|s| s.value)
    }
}

/// The most characters an error quotes of a line, and of what it says is
/// wrong with it.
const QUOTED_CHARS: usize = 120;

/// `s` cut to [`QUOTED_CHARS`] characters (with `...` when cut): an error
/// about a line of megabytes quotes its start.
fn clip(s: &str) -> String {
    match s.char_indices().nth(QUOTED_CHARS) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

fn valid_name(n: &str) -> bool {
    n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(n: &str) -> bool {
    n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `name{labels} value [timestamp] [# exemplar]`.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ', '\t']).ok_or("no value")?;
    let name = &line[..name_end];
    if !valid_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels: Vec<(String, String)> = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices();
        let end = loop {
            // A label name, or the closing brace (also after a trailing comma).
            let mut key = String::new();
            let mut closed = None;
            for (i, c) in chars.by_ref() {
                match c {
                    '}' if key.trim().is_empty() => {
                        closed = Some(i);
                        break;
                    }
                    '=' => break,
                    c => key.push(c),
                }
            }
            if let Some(i) = closed {
                break i;
            }
            let key = key.trim();
            if !valid_label_name(key) {
                return Err(format!("bad label name {key:?}"));
            }
            if !matches!(chars.next(), Some((_, '"'))) {
                return Err(format!("label {key} has no quoted value"));
            }
            let mut value = String::new();
            loop {
                match chars.next().map(|(_, c)| c) {
                    None => return Err(format!("label {key}'s value is not terminated")),
                    Some('"') => break,
                    Some('\\') => match chars.next().map(|(_, c)| c) {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => {
                            return Err(format!(
                                "bad escape \\{} in label {key}",
                                other.map(String::from).unwrap_or_default()
                            ));
                        }
                    },
                    Some(c) => value.push(c),
                }
            }
            if labels.iter().any(|(k, _)| k == key) {
                return Err(format!("label {key} twice"));
            }
            labels.push((key.to_owned(), value));
            // `,` then the next label (or `}`), or `}`.
            match chars.find(|(_, c)| !c.is_whitespace()) {
                Some((_, ',')) => {}
                Some((i, '}')) => break i,
                other => {
                    return Err(format!(
                        "expected , or }} after label {key}, found {:?}",
                        other.map(|(_, c)| c)
                    ));
                }
            }
        };
        rest = &r[end + 1..];
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = parse_value(value).ok_or_else(|| format!("value {value:?} is not a number"))?;
    // An optional timestamp, then an optional exemplar (`# {...} v [ts]`).
    let mut before_exemplar = fields.take_while(|f| *f != "#");
    match (before_exemplar.next(), before_exemplar.next()) {
        (None, _) => {}
        (Some(ts), _) if ts.parse::<f64>().is_err() => {
            return Err(format!("unexpected {ts:?} after the value"));
        }
        (Some(_), None) => {}
        (Some(_), Some(other)) => return Err(format!("unexpected {other:?} after the timestamp")),
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// A sample value: a float in Go's syntax, `+Inf`, `-Inf`, `NaN`.
fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        v if v
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E')) =>
        {
            v.parse().ok()
        }
        _ => None,
    }
}

/// One tenant as `GET /v1/tenants` shows it: the maintained counters `top`
/// shows and the age of its oldest due row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// The tenant's name.
    pub name: String,
    /// Rows pending (due, held, in flight or lane members).
    pub pending: i64,
    /// Rows claimed by a sink call now.
    pub in_flight: i64,
    /// Dead letters.
    pub dead: i64,
    /// Hooks held in quarantine.
    pub quarantined: i64,
    /// Busy ordering lanes.
    pub lanes: i64,
    /// Lanes whose head is waiting for a retry.
    pub lanes_blocked: i64,
    /// Lanes held by a dead letter until it is revived or dropped.
    pub lanes_held: i64,
    /// Rows delivered since the store was made (monotonic).
    pub delivered_total: i64,
    /// Age of the oldest due row not held by a pause, ms; `None` when no
    /// row is due.
    pub oldest_due_age_ms: Option<u64>,
}

/// One sink entry of a source as `GET /v1/sources` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkEntry {
    /// Its kind (`http`, `file`, `sqs`, ...), the `sink` label of the
    /// dispatch series.
    pub kind: String,
    /// Paused now (by the configuration, a runtime pause, or its source's).
    pub paused: bool,
}

/// One reading: every tenant, every sink entry, the `/metrics` samples.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// Tenants in the API's order (ordinal).
    pub tenants: Vec<Tenant>,
    /// The configured sources' names, in the API's order (name).
    pub sources: Vec<String>,
    /// Every sink entry of every source, in the API's order.
    pub sinks: Vec<SinkEntry>,
    /// The exposition.
    pub metrics: Metrics,
}

impl Snapshot {
    /// Parses one reading: `tenants_json` and `sources_json` are list
    /// answers of `GET /v1/tenants` and `GET /v1/sources` (`{"items": [...],
    /// ...}`, every page's items in one list), read as the API's types
    /// (`ankusa_admin::api_types`: a field they do not know is ignored),
    /// `metrics_text` the body of `/metrics` ([`Metrics::parse`]).
    ///
    /// # Errors
    ///
    /// [`ParseError`] naming the document and what is missing or malformed.
    pub fn parse(
        tenants_json: &str,
        sources_json: &str,
        metrics_text: &str,
    ) -> Result<Snapshot, ParseError> {
        let tenants: TenantList = serde_json::from_str(tenants_json)
            .map_err(|e| ParseError(format!("GET /v1/tenants: {e}")))?;
        let sources: SourceList = serde_json::from_str(sources_json)
            .map_err(|e| ParseError(format!("GET /v1/sources: {e}")))?;
        let metrics = Metrics::parse(metrics_text)?;
        let tenants = tenants
            .items
            .into_iter()
            .map(|t| Tenant {
                name: t.name,
                pending: t.counters.pending,
                in_flight: t.counters.in_flight,
                dead: t.counters.dead,
                quarantined: t.counters.quarantined,
                lanes: t.counters.lanes,
                lanes_blocked: t.counters.lanes_blocked,
                lanes_held: t.counters.lanes_held,
                delivered_total: t.counters.delivered_total,
                oldest_due_age_ms: t.oldest_due_age_ms,
            })
            .collect();
        let mut names = Vec::new();
        let mut sinks = Vec::new();
        for s in sources.items {
            for e in s.sinks {
                sinks.push(SinkEntry {
                    kind: e.kind,
                    paused: e.paused,
                });
            }
            names.push(s.name);
        }
        Ok(Snapshot {
            tenants,
            sources: names,
            sinks,
            metrics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// A piece of the relay's own exposition (prometheus-client's
    /// OpenMetrics text): families, labelled counters, a histogram, an info.
    const EXPOSITION: &str = r#"# HELP ankusa_queue_pending Rows pending.
# TYPE ankusa_queue_pending gauge
ankusa_queue_pending 7
# HELP ankusa_ingest_requests Requests answered by the ingest listener.
# TYPE ankusa_ingest_requests counter
ankusa_ingest_requests_total{source="orders",code="200"} 12
ankusa_ingest_requests_total{source="_none",code="404"} 1
# HELP ankusa_dispatch_oldest_due_age_seconds Age of the oldest due row.
# TYPE ankusa_dispatch_oldest_due_age_seconds gauge
ankusa_dispatch_oldest_due_age_seconds 2.5
# HELP ankusa_ingest_ack_seconds Ack latency.
# TYPE ankusa_ingest_ack_seconds histogram
ankusa_ingest_ack_seconds_sum 0.25
ankusa_ingest_ack_seconds_count 3
ankusa_ingest_ack_seconds_bucket{le="0.0005"} 0
ankusa_ingest_ack_seconds_bucket{le="+Inf"} 3
# HELP ankusa_build Build.
# TYPE ankusa_build info
ankusa_build_info{version="0.1.0"} 1
# EOF
"#;

    #[test]
    fn the_relays_exposition_parses_sample_by_sample() {
        let m = Metrics::parse(EXPOSITION).unwrap();
        let sample = |name: &str, l: &[(&str, &str)], value: f64| Sample {
            name: name.into(),
            labels: labels(l),
            value,
        };
        assert_eq!(
            m.samples,
            vec![
                sample("ankusa_queue_pending", &[], 7.0),
                sample(
                    "ankusa_ingest_requests_total",
                    &[("source", "orders"), ("code", "200")],
                    12.0
                ),
                sample(
                    "ankusa_ingest_requests_total",
                    &[("source", "_none"), ("code", "404")],
                    1.0
                ),
                sample("ankusa_dispatch_oldest_due_age_seconds", &[], 2.5),
                sample("ankusa_ingest_ack_seconds_sum", &[], 0.25),
                sample("ankusa_ingest_ack_seconds_count", &[], 3.0),
                sample("ankusa_ingest_ack_seconds_bucket", &[("le", "0.0005")], 0.0),
                sample("ankusa_ingest_ack_seconds_bucket", &[("le", "+Inf")], 3.0),
                sample("ankusa_build_info", &[("version", "0.1.0")], 1.0),
            ]
        );
        assert_eq!(m.value("ankusa_queue_pending"), Some(7.0));
        assert_eq!(
            m.value("ankusa_ingest_requests_total"),
            None,
            "labelled samples are not a plain value"
        );
        assert_eq!(m.sum("ankusa_ingest_requests_total", &[]), Some(13.0));
        assert_eq!(
            m.sum("ankusa_ingest_requests_total", &[("source", "orders")]),
            Some(12.0)
        );
        assert_eq!(
            m.sum("ankusa_ingest_requests_total", &[("source", "nobody")]),
            None
        );
    }

    #[test]
    fn label_values_are_unescaped_and_prometheus_text_is_read_too() {
        // Escapes, a comma and a brace inside a value, spaces and a trailing
        // comma (Prometheus 0.0.4), a timestamp, an exemplar, special values,
        // free comments and blank lines.
        let text = "# a comment\n\nm{a=\"x\\\"y\\\\z\\n\",b=\"1,}2\" , } 3 1712000000000\nn_total{le=\"1\"} 4 # {trace_id=\"t\"} 1\ninf +Inf\nnan NaN\nneg -Inf\nsci 1.5e3\n";
        let m = Metrics::parse(text).unwrap();
        assert_eq!(
            m.samples[0].labels,
            labels(&[("a", "x\"y\\z\n"), ("b", "1,}2")])
        );
        assert_eq!(m.samples[0].value, 3.0);
        assert_eq!(m.samples[1].value, 4.0);
        assert_eq!(m.value("inf"), Some(f64::INFINITY));
        assert!(m.value("nan").is_some_and(f64::is_nan));
        assert_eq!(m.value("neg"), Some(f64::NEG_INFINITY));
        assert_eq!(m.value("sci"), Some(1500.0));
    }

    #[test]
    fn a_malformed_exposition_is_an_error_that_names_its_line() {
        for (text, why) in [
            (
                "ok 1\n9bad 1\n",
                "/metrics line 2: bad metric name \"9bad\"",
            ),
            (
                "m{a=\"x} 1\n",
                "/metrics line 1: label a's value is not terminated",
            ),
            ("m{a=x} 1\n", "/metrics line 1: label a has no quoted value"),
            (
                "m{a=\"\\t\"} 1\n",
                "/metrics line 1: bad escape \\t in label a",
            ),
            ("m{a=\"1\",a=\"2\"} 1\n", "/metrics line 1: label a twice"),
            (
                "m{a=\"1\" b=\"2\"} 1\n",
                "/metrics line 1: expected , or } after label a, found Some('b')",
            ),
            ("m{1a=\"1\"} 1\n", "/metrics line 1: bad label name \"1a\""),
            ("m one\n", "/metrics line 1: value \"one\" is not a number"),
            ("m\n", "/metrics line 1: no value"),
            (
                "m 1 x\n",
                "/metrics line 1: unexpected \"x\" after the value",
            ),
            (
                "m 1 2 x\n",
                "/metrics line 1: unexpected \"x\" after the timestamp",
            ),
            ("# EOF\nm 1\n", "/metrics line 2: a line after # EOF"),
        ] {
            let e = Metrics::parse(text).unwrap_err();
            assert!(e.0.starts_with(why), "{text:?}: {e}");
        }
    }

    /// Regression (brk16): the error quoted the whole line, so a relay (or
    /// something else on its port) that answered one line of megabytes got
    /// that line printed back on stderr and on the status line. It quotes
    /// the line's start now, and what it found wrong as briefly.
    #[test]
    fn an_error_about_a_huge_line_quotes_only_its_start() {
        let huge = format!("{} 1\n", "m".repeat(1 << 20)).replacen('m', "9", 1);
        let e = Metrics::parse(&huge).unwrap_err();
        let start: String = e.0.chars().take(200).collect();
        assert!(
            e.0.starts_with("/metrics line 1: bad metric name \"9mmm"),
            "{start}"
        );
        assert!(e.0.len() < 300, "{} bytes: {start}", e.0.len());
        assert!(e.0.ends_with("mmm...\""), "{start}");
        let e = Metrics::parse("m{a=\"\u{e9}\u{e9}\"} x\n").unwrap_err();
        assert_eq!(
            e.0,
            "/metrics line 1: value \"x\" is not a number: \"m{a=\\\"\u{e9}\u{e9}\\\"} x\""
        );
    }

    const TENANTS: &str = r#"{"items": [
      {"name": "acme", "ordinal": 1, "configured": true, "max_pending": 100, "max_pending_bytes": 1000,
       "counters": {"pending": 5, "pending_bytes": 50, "in_flight": 2, "dead": 1, "dead_bytes": 10, "quarantined": 3,
                    "delivered_total": 40, "dead_lettered_total": 4, "retries_total": 6, "lanes": 2, "lanes_blocked": 1, "lane_members": 3},
       "oldest_due_at_ms": 1000, "oldest_due_age_ms": 2500}
    ], "next_cursor": null}"#;
    const SOURCES: &str = r#"{"items": [
      {"name": "orders", "path": "/hooks/orders", "tenant": {"fixed": "acme"}, "verification": "none",
       "dedupe": null, "pause": {"by_config": false, "by_runtime": null}, "paused": false, "sinks": [
        {"name": "web", "type": "http", "index": 0, "ordered": false, "ordering_key": null,
         "pause": {"by_config": false, "by_runtime": null}, "paused": false, "breakers": []},
        {"name": "log", "type": "file", "index": 1, "ordered": false, "ordering_key": null,
         "pause": {"by_config": true, "by_runtime": null}, "paused": true, "breakers": []}]},
      {"name": "quiet", "path": "/hooks/quiet", "tenant": {"path": true}, "verification": "none",
       "dedupe": null, "pause": {"by_config": false, "by_runtime": null}, "paused": false, "sinks": []}
    ], "next_cursor": null}"#;

    #[test]
    fn a_snapshot_reads_the_tenants_the_sources_and_the_metrics() {
        let s = Snapshot::parse(TENANTS, SOURCES, "ankusa_dlq_dead 1\n").unwrap();
        assert_eq!(
            s.tenants,
            vec![Tenant {
                name: "acme".into(),
                pending: 5,
                in_flight: 2,
                dead: 1,
                quarantined: 3,
                lanes: 2,
                lanes_blocked: 1,
                lanes_held: 0,
                delivered_total: 40,
                oldest_due_age_ms: Some(2500),
            }]
        );
        assert_eq!(s.sources, vec!["orders".to_owned(), "quiet".to_owned()]);
        assert_eq!(
            s.sinks,
            vec![
                SinkEntry {
                    kind: "http".into(),
                    paused: false
                },
                SinkEntry {
                    kind: "file".into(),
                    paused: true
                },
            ]
        );
        assert_eq!(s.metrics.value("ankusa_dlq_dead"), Some(1.0));
    }

    #[test]
    fn an_answer_that_is_not_the_apis_is_an_error_that_names_the_route() {
        let e = Snapshot::parse(
            r#"{"items": [{"name": "acme", "ordinal": 1, "configured": true}], "next_cursor": null}"#,
            SOURCES,
            "",
        ).unwrap_err();
        assert!(
            e.0.starts_with("GET /v1/tenants: missing field `counters`"),
            "{e}"
        );
        let e = Snapshot::parse(TENANTS, "<html>", "").unwrap_err();
        assert!(e.0.starts_with("GET /v1/sources: expected value"), "{e}");
        let e = Snapshot::parse(TENANTS, SOURCES, "m{\n").unwrap_err();
        assert!(e.0.starts_with("/metrics line 1"), "{e}");
    }
}

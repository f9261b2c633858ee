//! The operator's files in `deploy/` (README, "Dashboard and alerts"): the
//! Grafana dashboard (`deploy/grafana/ankusa.json`) and the Prometheus alert
//! rules (`deploy/prometheus/ankusa-alerts.yml`, unit-tested by
//! `ankusa-alerts.test.yml`), checked with the real tools against the real
//! relay:
//!
//! - promtool checks the rules and runs their unit tests, and every alert
//!   has a case where it fires and one where it must not;
//! - the dashboard is an importable Grafana dashboard: its datasource is the
//!   `DS_PROMETHEUS` input and variable, every panel and query names it, and
//!   every query keeps to the `job` and `instance` variables;
//! - every series a panel, a variable or an alert names is in the real
//!   relay's `/metrics` after a scripted run, with the suffix its type allows
//!   (`_total` of a counter, `_bucket`/`_sum`/`_count` of a histogram), with
//!   the labels it filters on, and every family of the exposition is on the
//!   dashboard;
//! - a real Prometheus scrapes that relay with the rules loaded: every
//!   panel's query answers series, the variables find the relay, and every
//!   rule evaluates without error.
//!
//! promtool and prometheus come with Debian's `prometheus` package, which
//! `.ci/run` installs through `.ci/promtool.sh` (no server left running).
//! Without them the tests that need them fail and say how to install them,
//! as the broker tests fail without their brokers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::metrics::{Kind, Sample, parse, scrape};
use crate::relay::{Relay, client, config};
use crate::sink::{Sink, until};

const LONG: Duration = Duration::from_secs(120);

/// The datasource every panel, query and variable names: the dashboard's
/// `DS_PROMETHEUS` input (what Grafana's import asks for) and variable.
const DS: &str = "${DS_PROMETHEUS}";

/// The rows the dashboard has, in order.
const ROWS: [&str; 10] = [
    "Overview",
    "Ingest",
    "Delivery",
    "Backlog",
    "Lanes",
    "Breakers",
    "Dead letters",
    "Writer",
    "Engine",
    "Operations",
];

/// Labels Prometheus adds to every scraped series (the target's), never in
/// the exposition itself.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

/// Families the dashboard shows that have no sample in this build's
/// exposition (their label names cannot be checked against it): the
/// forwarded-header drops are written per broker sink kind compiled in, so a
/// build with none has no sample of them.
fn sampleless() -> BTreeSet<String> {
    let brokers = cfg!(any(
        feature = "redis",
        feature = "nats",
        feature = "rabbitmq",
        feature = "kafka",
        feature = "pubsub",
        feature = "sqs"
    ));
    // A transform failure is a dead letter, which the scripted run makes
    // none of (tests/it/transform.rs checks the counter).
    let mut out = BTreeSet::from(["ankusa_transform_failed".to_owned()]);
    if !brokers {
        out.insert("ankusa_forwarded_headers_dropped".to_owned());
    }
    out
}

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// `name` on PATH, or a panic that says how to install it.
fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|f| f.is_file()))
        .unwrap_or_else(|| {
            panic!(
                "{name} is not installed (not found on PATH). It comes with Debian's `prometheus` package: run `bash .ci/promtool.sh` \
                 as root, which installs it without starting its server (CI's .ci/run does this)"
            )
        })
}

fn dashboard() -> Value {
    let path = deploy("grafana/ankusa.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()))
}

/// The alert rules file as JSON values: `groups[].rules[]`.
fn alert_rules() -> Vec<Value> {
    let path = deploy("prometheus/ankusa-alerts.yml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Value =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let groups = doc["groups"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no groups", path.display()));
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// Every panel, the panels of collapsed rows included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner);
        }
    }
    out
}

/// `(where, PromQL)` of every panel query of the dashboard.
fn panel_queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {:?}: a target without expr", p["title"]));
            out.push((
                format!(
                    "panel {:?} ({})",
                    p["title"].as_str().unwrap_or("?"),
                    t["refId"].as_str().unwrap_or("?")
                ),
                expr.to_owned(),
            ));
        }
    }
    out
}

/// `(variable, selector, label)` of each query variable, its query being
/// Grafana's `label_values(selector, label)`.
fn variable_queries(d: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().expect("templating.list") {
        if v["type"] != "query" {
            continue;
        }
        let name = v["name"].as_str().expect("variable name").to_owned();
        let q = v["query"]
            .as_str()
            .unwrap_or_else(|| panic!("variable {name}: query is not a string"));
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| {
                panic!("variable {name}: {q:?} is not label_values(selector, label)")
            });
        let (selector, label) = inner
            .rsplit_once(',')
            .unwrap_or_else(|| panic!("variable {name}: {q:?} has no label"));
        out.push((name, selector.trim().to_owned(), label.trim().to_owned()));
    }
    out
}

/// A label matcher of a selector: `label op "value"`.
#[derive(Clone, Debug, PartialEq)]
struct Matcher {
    label: String,
    op: String,
    value: String,
}

/// A metric selector of a PromQL expression: `metric{matchers}`.
#[derive(Clone, Debug, PartialEq)]
struct Selector {
    metric: String,
    matchers: Vec<Matcher>,
}

/// Aggregation operators: names followed by `by`/`without` or `(`.
const AGGREGATIONS: [&str; 12] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];
/// Keywords followed by a list of label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Other keywords and literals.
const KEYWORDS: [&str; 8] = [
    "bool", "and", "or", "unless", "offset", "atan2", "inf", "nan",
];

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The string literal starting at `at` (a quote) of `expr`: (its value, the
/// index after it).
fn string_literal(expr: &str, at: usize) -> (String, usize) {
    let b = expr.as_bytes();
    let quote = b[at];
    let mut value = String::new();
    let mut chars = expr[at + 1..].char_indices();
    while let Some((j, c)) = chars.next() {
        if c == quote as char {
            return (value, at + 1 + j + 1);
        }
        if c == '\\' && quote != b'`' {
            match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, e)) => value.push(e),
                None => break,
            }
        } else {
            value.push(c);
        }
    }
    panic!("unterminated string in {expr:?}")
}

/// The label matchers of the `{...}` starting at `at`: (matchers, the index
/// after the `}`).
fn matchers(expr: &str, at: usize) -> (Vec<Matcher>, usize) {
    let b = expr.as_bytes();
    let mut i = at + 1;
    let mut out = Vec::new();
    loop {
        i = skip_ws(b, i);
        if b.get(i) == Some(&b'}') {
            return (out, i + 1);
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let label = expr[start..i].to_owned();
        assert!(
            !label.is_empty(),
            "a matcher without a label name at {start} in {expr:?}"
        );
        i = skip_ws(b, i);
        let op = ["=~", "!~", "!=", "="]
            .into_iter()
            .find(|op| expr[i..].starts_with(op))
            .unwrap_or_else(|| panic!("no operator after {label} in {expr:?}"));
        i = skip_ws(b, i + op.len());
        assert!(
            matches!(b.get(i), Some(b'"' | b'\'' | b'`')),
            "no quoted value after {label}{op} in {expr:?}"
        );
        let (value, end) = string_literal(expr, i);
        out.push(Matcher {
            label,
            op: op.to_owned(),
            value,
        });
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => {}
            other => panic!(
                "expected , or }} after a matcher in {expr:?}, got {:?}",
                other.map(|c| *c as char)
            ),
        }
    }
}

/// Every metric selector of the PromQL expression `expr` (a small lexer: it
/// skips strings, range and subquery brackets, numbers, functions,
/// aggregations with their label lists, and keywords; what is left are
/// metric names, each with the matchers that follow it).
fn selectors(expr: &str) -> Vec<Selector> {
    let b = expr.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' | b'`' => i = string_literal(expr, i).1,
            b'[' => {
                i += expr[i..]
                    .find(']')
                    .unwrap_or_else(|| panic!("unclosed [ in {expr:?}"))
                    + 1
            }
            b'{' => panic!("a selector without a metric name in {expr:?}: name the metric"),
            c if c.is_ascii_digit() || c == b'.' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':')
                {
                    i += 1;
                }
                let word = &expr[start..i];
                let lower = word.to_ascii_lowercase();
                let next = skip_ws(b, i);
                if LABEL_LISTS.contains(&lower.as_str()) {
                    if b.get(next) == Some(&b'(') {
                        i = next
                            + expr[next..]
                                .find(')')
                                .unwrap_or_else(|| panic!("unclosed label list in {expr:?}"))
                            + 1;
                    }
                } else if KEYWORDS.contains(&lower.as_str())
                    || AGGREGATIONS.contains(&lower.as_str())
                    || b.get(next) == Some(&b'(')
                {
                    // A keyword, an aggregation or a function call.
                } else if b.get(next) == Some(&b'{') {
                    let (m, end) = matchers(expr, next);
                    out.push(Selector {
                        metric: word.to_owned(),
                        matchers: m,
                    });
                    i = end;
                } else {
                    out.push(Selector {
                        metric: word.to_owned(),
                        matchers: Vec::new(),
                    });
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// Whether `re`, a regex made of literals, `.` and `|` only, matches all of
/// `s` (PromQL regexes are anchored); `None` for any other regex.
fn small_regex_matches(re: &str, s: &str) -> Option<bool> {
    if !re
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '|'))
    {
        return None;
    }
    Some(re.split('|').any(|alt| {
        alt.len() == s.len() && alt.chars().zip(s.chars()).all(|(a, c)| a == '.' || a == c)
    }))
}

/// The family and type of the series `metric` as the exposition has it:
/// `X_total` of a counter `X`, `X_bucket`/`X_sum`/`X_count` of a histogram,
/// `X_info` of an info, a gauge's own name. `Err` says what is wrong.
fn resolve(families: &BTreeMap<String, Kind>, metric: &str) -> Result<(String, Kind), String> {
    let suffixes: [(&str, Kind); 6] = [
        ("_total", Kind::Counter),
        ("_bucket", Kind::Histogram),
        ("_sum", Kind::Histogram),
        ("_count", Kind::Histogram),
        ("_info", Kind::Info),
        ("", Kind::Gauge),
    ];
    for (suffix, kind) in suffixes {
        if let Some(family) = metric.strip_suffix(suffix)
            && families.get(family) == Some(&kind)
        {
            return Ok((family.to_owned(), kind));
        }
    }
    match families.get(metric) {
        Some(kind) => Err(format!(
            "{metric} is a {kind:?} family: its series are named with the suffix its type has (_total, _bucket/_sum/_count, _info)"
        )),
        None => Err(format!(
            "no family of the relay's /metrics has a series named {metric}"
        )),
    }
}

/// A relay after a scripted run that makes a sample of every family the
/// dashboard and the alerts use (but [`sampleless`]): requests by source and
/// code (200 and a 404), an ordered http sink with keyed and keyless hooks, a
/// file sink whose filter leaves three hooks out, every delivery settled.
struct ScriptedRun {
    relay: Relay,
    receiver: Sink,
}

impl ScriptedRun {
    async fn start() -> ScriptedRun {
        let receiver = Sink::ok().await;
        let relay = Relay::start(&config(
            "memory",
            &format!(
                "
sources:
  - name: orders
    sinks:
      - {{type: http, url: '{}', ordered: true, ordering_key: {{header: x-entity-id}}}}
      - {{type: file, name: invoices, path: '{{DIR}}/invoices.ndjson', filter: {{json: type, prefix: 'invoice.'}}}}
",
                receiver.url()
            ),
        ))
        .await;
        for (key, body) in [
            (Some("k1"), r#"{"type":"order.created","n":1}"#),
            (Some("k2"), r#"{"type":"order.created","n":2}"#),
            (None, r#"{"type":"order.created","n":3}"#),
            (Some("k1"), r#"{"type":"invoice.paid","n":4}"#),
        ] {
            let headers: Vec<(&str, &str)> = key.map(|k| ("x-entity-id", k)).into_iter().collect();
            relay.post("/hooks/orders", &headers, body).await.id();
        }
        let r = client()
            .post(relay.url("/hooks/nobody"))
            .body("{}")
            .send()
            .await
            .expect("POST");
        assert_eq!(r.status(), 404);
        // Four rows to the http sink, one to the file sink (the invoice).
        until("the five rows delivered", LONG, async || {
            let m = relay.metrics().await;
            (m.get("ankusa_dispatch_delivered_total") == Some(&5.0)
                && m.get("ankusa_dispatch_in_flight") == Some(&0.0))
            .then_some(())
        })
        .await;
        assert_eq!(receiver.delivered().len(), 4);
        let lines = std::fs::read_to_string(relay.dir.path().join("invoices.ndjson"))
            .expect("the file sink's file");
        assert_eq!(lines.lines().count(), 1, "{lines}");
        ScriptedRun { relay, receiver }
    }
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests_cover_every_alert() {
    let promtool = tool("promtool");
    let rules = alert_rules();
    let names: Vec<&str> = rules
        .iter()
        .map(|r| r["alert"].as_str().expect("every rule is an alert"))
        .collect();
    assert_eq!(
        names,
        [
            "AnkusaBacklogStale",
            "AnkusaBacklogGrowing",
            "AnkusaLanesBlocked",
            "AnkusaLanesHeld",
            "AnkusaDeadLetterSpike",
            "AnkusaBreakerOpen",
            "AnkusaIngestUnavailable"
        ]
    );
    // What an operator reads: a severity, a summary, and a description that
    // names the `ankusa` command to run next.
    for r in &rules {
        let name = r["alert"].as_str().unwrap_or_default();
        assert!(
            matches!(
                r["labels"]["severity"].as_str(),
                Some("warning" | "critical")
            ),
            "{name}: severity"
        );
        assert!(
            r["annotations"]["summary"]
                .as_str()
                .is_some_and(|s| s.contains("{{ $labels.instance }}")),
            "{name}: summary"
        );
        let d = r["annotations"]["description"].as_str().unwrap_or_default();
        assert!(
            d.contains("`ankusa "),
            "{name}: the description names no ankusa command: {d}"
        );
    }

    let dir = deploy("prometheus");
    let check = Command::new(&promtool)
        .args(["check", "rules", "ankusa-alerts.yml"])
        .current_dir(&dir)
        .output()
        .expect("run promtool");
    let out = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "promtool check rules:\n{out}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{out}"
    );

    let test = Command::new(&promtool)
        .args(["test", "rules", "ankusa-alerts.test.yml"])
        .current_dir(&dir)
        .output()
        .expect("run promtool");
    let out =
        String::from_utf8_lossy(&test.stdout).into_owned() + &String::from_utf8_lossy(&test.stderr);
    assert!(test.status.success(), "promtool test rules:\n{out}");
    assert!(out.contains("SUCCESS") && !out.contains("FAILED"), "{out}");

    // Every alert is shown firing, and not firing: no alert at some time, or
    // alerts for fewer instances than its group feeds (promtool checks the
    // whole list of firing alerts; this checks that each alert has both).
    let path = dir.join("ankusa-alerts.test.yml");
    let tests: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&path).expect("the rule tests"))
            .expect("YAML");
    let instance = |labels: &str| {
        labels
            .split("instance=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(str::to_owned)
    };
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for group in tests["tests"].as_array().expect("tests") {
        let fed: BTreeSet<String> = group["input_series"]
            .as_array()
            .expect("input_series")
            .iter()
            .filter_map(|s| instance(s["series"].as_str()?))
            .collect();
        for case in group["alert_rule_test"]
            .as_array()
            .expect("alert_rule_test")
        {
            let name = case["alertname"].as_str().expect("alertname").to_owned();
            let firing: BTreeSet<String> = case["exp_alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a["exp_labels"]["instance"].as_str().map(str::to_owned))
                .collect();
            if !firing.is_empty() {
                fires.insert(name.clone());
            }
            if firing.len() < fed.len() {
                quiet.insert(name);
            }
        }
    }
    for name in &names {
        assert!(fires.contains(*name), "no unit test shows {name} firing");
        assert!(
            quiet.contains(*name),
            "no unit test shows {name} not firing"
        );
    }
}

/// The function whose argument list holds byte `at` of `expr` (the name
/// before the innermost `(` still open there), if any.
fn enclosing_function(expr: &str, at: usize) -> Option<&str> {
    let b = expr.as_bytes();
    let mut depth = 0usize;
    for i in (0..at).rev() {
        match b[i] {
            b')' => depth += 1,
            b'(' if depth > 0 => depth -= 1,
            b'(' => {
                let name_end = expr[..i].trim_end().len();
                let name_start = expr[..name_end]
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(0, |j| j + 1);
                return Some(&expr[name_start..name_end]);
            }
            _ => {}
        }
    }
    None
}

/// Regression (brk16): the store's totals (`ankusa_dispatch_delivered_total`,
/// `_retries_total`, `_dead_lettered_total`) survive restarts and drop by a
/// tenant's share when it is purged, which `rate` and `increase` read as a
/// reset followed by the whole remainder: AnkusaDeadLetterSpike fired after a
/// purge and the Delivered panels spiked. No panel and no rule takes a rate of
/// them; the relay's own `ankusa_dispatch_attempts_total` is for rates.
#[test]
fn the_stores_totals_are_never_read_as_rates() {
    const STORE_TOTALS: [&str; 3] = [
        "ankusa_dispatch_delivered_total",
        "ankusa_dispatch_retries_total",
        "ankusa_dispatch_dead_lettered_total",
    ];
    const RATES: [&str; 5] = ["rate", "irate", "increase", "deriv", "delta"];
    assert_eq!(
        enclosing_function("sum(rate(x{a=\"(\"}[5m])) / y", 10),
        Some("rate")
    );
    assert_eq!(
        enclosing_function("sum by (i) (increase(x[5m]))", 21),
        Some("increase")
    );
    assert_eq!(enclosing_function("sum(x)", 4), Some("sum"));
    let mut queries = panel_queries(&dashboard());
    queries.extend(alert_rules().iter().map(|r| {
        (
            format!("alert {}", r["alert"]),
            r["expr"].as_str().unwrap_or_default().to_owned(),
        )
    }));
    let mut shown = 0;
    for (place, expr) in &queries {
        for total in STORE_TOTALS {
            for (at, _) in expr.match_indices(total) {
                shown += 1;
                let f = enclosing_function(expr, at);
                assert!(
                    !f.is_some_and(|f| RATES.contains(&f)),
                    "{place}: {f:?}({total}...): a purge reads as a spike: {expr}"
                );
            }
        }
    }
    assert!(
        shown >= 3,
        "the store's totals are on the dashboard (every family is): {shown}"
    );
}

#[test]
fn the_dashboard_is_importable_and_every_panel_queries_the_datasource_variable() {
    let d = dashboard();
    assert!(
        d["title"].as_str().is_some_and(|t| !t.is_empty())
            && d["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "title and uid"
    );
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion {}",
        d["schemaVersion"]
    );
    assert!(
        d["id"].is_null(),
        "an exported dashboard has no id (the importing Grafana gives one)"
    );

    // Grafana's import asks for the datasource of each input ...
    let inputs = d["__inputs"].as_array().expect("__inputs");
    assert_eq!(inputs.len(), 1, "{inputs:?}");
    assert_eq!(inputs[0]["name"], "DS_PROMETHEUS");
    assert_eq!(inputs[0]["type"], "datasource");
    assert_eq!(inputs[0]["pluginId"], "prometheus");
    // ... and a dashboard provisioned from the file (no import) resolves the
    // same name through its datasource variable.
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    assert_eq!(var("DS_PROMETHEUS")["type"], "datasource");
    assert_eq!(var("DS_PROMETHEUS")["query"], "prometheus");
    let ds = serde_json::json!({"type": "prometheus", "uid": DS});
    for name in ["job", "instance"] {
        assert_eq!(var(name)["type"], "query", "{name}");
        assert_eq!(var(name)["datasource"], ds, "{name}'s datasource");
    }
    let defined: BTreeSet<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();

    // Every panel: an id, a type, a title, a place on the 24-column grid that
    // no other panel takes; every non-row panel and each of its queries on
    // the datasource variable.
    let all = panels(&d);
    let mut ids = BTreeSet::new();
    let mut cells: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut rows = Vec::new();
    let mut in_row: BTreeMap<String, usize> = BTreeMap::new();
    for p in &all {
        let title = p["title"]
            .as_str()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| panic!("a panel without a title: {p}"));
        let id = p["id"].as_u64().unwrap_or_else(|| panic!("{title}: no id"));
        assert!(ids.insert(id), "{title}: id {id} twice");
        let ty = p["type"]
            .as_str()
            .unwrap_or_else(|| panic!("{title}: no type"));
        assert!(
            ["row", "timeseries", "stat"].contains(&ty),
            "{title}: type {ty}"
        );
        let g = &p["gridPos"];
        let [h, w, x, y] = ["h", "w", "x", "y"].map(|k| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k}"))
        });
        assert!(
            h >= 1 && (1..=24).contains(&w) && x + w <= 24,
            "{title}: gridPos {g}"
        );
        for cx in x..x + w {
            for cy in y..y + h {
                if let Some(other) = cells.insert((cx, cy), title.to_owned()) {
                    panic!("{title} overlaps {other} at column {cx}, row {cy}");
                }
            }
        }
        if ty == "row" {
            assert!(p["panels"].is_array(), "{title}: a row's panels");
            rows.push(title.to_owned());
            continue;
        }
        *in_row
            .entry(
                rows.last()
                    .cloned()
                    .unwrap_or_else(|| panic!("{title} is above the first row")),
            )
            .or_default() += 1;
        assert_eq!(p["datasource"], ds, "{title}: the panel's datasource");
        let targets = p["targets"]
            .as_array()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| panic!("{title}: no targets"));
        let mut refs = BTreeSet::new();
        for t in targets {
            let r = t["refId"]
                .as_str()
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| panic!("{title}: a target without refId"));
            assert!(refs.insert(r), "{title}: refId {r} twice");
            assert_eq!(t["datasource"], ds, "{title} ({r}): the query's datasource");
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                "{title} ({r}): no expr"
            );
        }
    }
    assert_eq!(rows, ROWS);
    for r in ROWS {
        assert!(
            in_row.get(r).is_some_and(|n| *n > 0),
            "row {r} has no panel"
        );
    }

    // Every series a query reads keeps to the job and instance variables,
    // and every variable a query names is defined (or Grafana's own).
    let mut exprs = panel_queries(&d);
    exprs.extend(
        variable_queries(&d)
            .into_iter()
            .map(|(v, sel, _)| (format!("variable {v}"), sel)),
    );
    for (place, expr) in &exprs {
        let sels = selectors(expr);
        assert!(!sels.is_empty(), "{place}: no series in {expr}");
        for s in sels.iter().filter(|_| !place.starts_with("variable")) {
            for (label, var) in [("job", "$job"), ("instance", "$instance")] {
                assert!(
                    s.matchers
                        .iter()
                        .any(|m| m.label == label && m.op == "=~" && m.value == var),
                    "{place}: {} is not filtered by {label}=~\"{var}\" in {expr}",
                    s.metric
                );
            }
        }
        for (i, _) in expr.match_indices('$') {
            let name: String = expr[i + 1..]
                .trim_start_matches('{')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                name.starts_with("__") || defined.contains(name.as_str()),
                "{place}: ${name} is no variable of the dashboard"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_dashboard_and_the_alerts_name_is_in_the_real_exposition() {
    let run = ScriptedRun::start().await;
    let (families, samples) = parse(&scrape(&run.relay).await);
    let d = dashboard();
    let on_dashboard: Vec<(String, String)> = panel_queries(&d)
        .into_iter()
        .chain(
            variable_queries(&d)
                .into_iter()
                .map(|(v, sel, _)| (format!("variable {v}"), sel)),
        )
        .collect();
    let alerts: Vec<(String, String)> = alert_rules()
        .iter()
        .map(|r| {
            (
                format!("alert {}", r["alert"].as_str().unwrap_or("?")),
                r["expr"].as_str().expect("expr").to_owned(),
            )
        })
        .collect();

    let by_name =
        |name: &str| -> Vec<&Sample> { samples.iter().filter(|s| s.name == name).collect() };
    let mut shown = BTreeSet::new();
    let mut without_samples = BTreeSet::new();
    let mut checked = 0;
    for (place, expr) in on_dashboard.iter().chain(&alerts) {
        for s in selectors(expr) {
            let (family, _) = resolve(&families, &s.metric)
                .unwrap_or_else(|e| panic!("{place}: {e}\n  in {expr}"));
            if !place.starts_with("alert") {
                shown.insert(family.clone());
            }
            let found = by_name(&s.metric);
            if found.is_empty() {
                assert!(
                    sampleless().contains(&family),
                    "{place}: the scripted run made no sample of {}: extend the run",
                    s.metric
                );
                without_samples.insert(family);
                continue;
            }
            for m in s
                .matchers
                .iter()
                .filter(|m| !TARGET_LABELS.contains(&m.label.as_str()))
            {
                // The values this label takes: those of the run, and for the
                // status code every code the ingest listener answers.
                let mut values: BTreeSet<String> = found
                    .iter()
                    .flat_map(|x| {
                        x.labels
                            .iter()
                            .filter(|(k, _)| *k == m.label)
                            .map(|(_, v)| v.clone())
                    })
                    .collect();
                assert!(
                    !values.is_empty(),
                    "{place}: {} has no label {:?}\n  in {expr}",
                    s.metric,
                    m.label
                );
                if m.label == "code" {
                    values.extend(
                        ankusa_edge::server::metrics::CODES
                            .iter()
                            .map(|c| c.to_string()),
                    );
                    values.insert("other".into());
                }
                match m.op.as_str() {
                    "=" | "!=" => assert!(
                        values.contains(&m.value),
                        "{place}: {}{{{}{}{:?}}}: the relay writes no such value ({values:?})",
                        s.metric,
                        m.label,
                        m.op,
                        m.value
                    ),
                    _ => {
                        let matched: Vec<&String> = values
                            .iter()
                            .filter(|v| {
                                small_regex_matches(&m.value, v)
                                    .unwrap_or_else(|| panic!("{place}: regex {:?} is beyond this test's matcher (literals, '.', '|')", m.value))
                            })
                            .collect();
                        assert!(
                            !matched.is_empty(),
                            "{place}: {}{{{}{}{:?}}} matches none of {values:?}",
                            s.metric,
                            m.label,
                            m.op,
                            m.value
                        );
                        // An alternation of plain values names real ones.
                        if !m.value.contains('.') {
                            for alt in m.value.split('|') {
                                assert!(
                                    values.contains(alt),
                                    "{place}: {} {:?}: no value {alt:?}",
                                    s.metric,
                                    m.label
                                );
                            }
                        }
                    }
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 60, "{checked} selectors checked");
    assert_eq!(
        without_samples,
        sampleless(),
        "families without a sample in the run"
    );
    // Every family of the exposition has a panel.
    let missing: Vec<&String> = families.keys().filter(|f| !shown.contains(*f)).collect();
    assert!(
        missing.is_empty(),
        "families of /metrics on no panel: {missing:?}"
    );
    assert_eq!(run.receiver.delivered().len(), 4);
}

/// A Prometheus server (Debian's `prometheus`) scraping one target every
/// second, with the alert rules loaded, on a free loopback port and a
/// temporary store; killed when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: std::net::SocketAddr) -> Prometheus {
        let bin = tool("prometheus");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: ['{}']\nscrape_configs:\n  - job_name: ankusa\n    static_configs: [{{targets: ['{target}']}}]\n",
                deploy("prometheus/ankusa-alerts.yml").display()
            ),
        )
        .expect("write prometheus.yml");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus { child, addr, dir }
    }

    /// Waits until `/-/ready` answers 200; panics with its log if it exits
    /// first (its port taken, a config it refuses) or is not ready in time.
    async fn ready(&mut self) {
        let deadline = std::time::Instant::now() + LONG;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "prometheus exited ({status}) before it was ready:\n{}",
                    self.log()
                );
            }
            if client()
                .get(format!("http://{}/-/ready", self.addr))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "prometheus not ready within {LONG:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// GET `path?query` of the HTTP API: its `data` (status "success"), or
    /// `Err` with the error or the transport failure.
    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, String> {
        let q: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        let url = format!("http://{}{path}?{}", self.addr, q.join("&"));
        let resp = client().get(&url).send().await.map_err(|e| e.to_string())?;
        let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
        let body: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&bytes)))?;
        if body["status"] == "success" {
            Ok(body["data"].clone())
        } else {
            Err(body.to_string())
        }
    }

    /// The instant vector `expr` answers now.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api("/api/v1/query", &[("query", expr)]).await?;
        assert_eq!(data["resultType"], "vector", "{expr}");
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encoding of a URL query component.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A panel's query as Grafana sends it with the variables at the values a
/// one-relay setup has: the job `ankusa`, every instance, and a rate window
/// that holds several of the test's one-second scrapes.
fn as_sent(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$job", "ankusa")
        .replace("$instance", ".+")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scraping_the_relay_answers_every_panel_and_evaluates_every_rule() {
    let run = ScriptedRun::start().await;
    let mut prom = Prometheus::start(run.relay.admin);
    prom.ready().await;
    // Three scrapes of the relay: every rate() has two samples in its window.
    until("three scrapes of the relay", LONG, async || {
        let r = prom
            .query(r#"count_over_time(ankusa_build_info{job="ankusa"}[1m])"#)
            .await
            .ok()?;
        let n: f64 = r.first()?["value"][1].as_str()?.parse().ok()?;
        (n >= 3.0).then_some(())
    })
    .await;

    // Every panel answers series, each with the labels its legend shows.
    let d = dashboard();
    let mut wrong = Vec::new();
    let no_sample = sampleless();
    for p in panels(&d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            // A family the scripted run writes no sample of has no series
            // to answer (`sampleless`: its own test checks it).
            if no_sample
                .iter()
                .any(|f| t["expr"].as_str().unwrap_or_default().contains(f.as_str()))
            {
                continue;
            }
            let place = format!(
                "panel {:?} ({})",
                p["title"].as_str().unwrap_or("?"),
                t["refId"].as_str().unwrap_or("?")
            );
            let sent = as_sent(t["expr"].as_str().unwrap_or_default());
            let legend = t["legendFormat"].as_str().unwrap_or_default();
            let shown: Vec<&str> = legend
                .split("{{")
                .skip(1)
                .filter_map(|r| r.split("}}").next())
                .map(str::trim)
                .collect();
            match prom.query(&sent).await {
                Ok(r) if r.is_empty() => wrong.push(format!("{place}: no series for {sent}")),
                Ok(r) => {
                    for series in &r {
                        for label in &shown {
                            if series["metric"][label].as_str().is_none_or(str::is_empty) {
                                wrong.push(format!(
                                    "{place}: legend {legend:?} shows {label}, which {} lacks",
                                    series["metric"]
                                ));
                            }
                        }
                    }
                }
                Err(e) => wrong.push(format!("{place}: {e} for {sent}")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "panels without data or with legends on missing labels:\n{}\n{}",
        wrong.join("\n"),
        prom.log()
    );

    // A few panels with what the run did: its requests by source and code,
    // nothing pending or dead, the version.
    let by = |expr: &str| {
        let expr = panel_queries(&d)
            .into_iter()
            .map(|(_, e)| e)
            .find(|e| e.contains(expr))
            .unwrap_or_else(|| panic!("no panel reads {expr}"));
        as_sent(&expr)
    };
    let requests = prom
        .query(&by(
            "sum by (source, code) (rate(ankusa_ingest_requests_total",
        ))
        .await
        .expect("requests");
    let series: BTreeSet<(String, String)> = requests
        .iter()
        .map(|r| {
            (
                r["metric"]["source"].as_str().unwrap_or("?").to_owned(),
                r["metric"]["code"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        series,
        BTreeSet::from([
            ("orders".to_owned(), "200".to_owned()),
            ("_none".to_owned(), "404".to_owned())
        ])
    );
    for gauge in ["sum(ankusa_queue_pending{", "sum(ankusa_dlq_dead{"] {
        let r = prom.query(&by(gauge)).await.expect(gauge);
        assert_eq!(r.len(), 1, "{gauge}: {r:?}");
        assert_eq!(r[0]["value"][1], "0", "{gauge}");
    }
    let version = prom
        .query(&by("ankusa_build_info{"))
        .await
        .expect("version");
    assert_eq!(version.len(), 1, "{version:?}");
    assert_eq!(version[0]["metric"]["version"], env!("CARGO_PKG_VERSION"));

    // The variables find the relay (Grafana's label_values(selector, label)
    // is this call).
    let admin = run.relay.admin.to_string();
    for (name, selector, label) in variable_queries(&d) {
        let sel = selector.replace("$job", "ankusa");
        let values = prom
            .api(
                &format!("/api/v1/label/{label}/values"),
                &[("match[]", &sel)],
            )
            .await
            .unwrap_or_else(|e| panic!("variable {name}: {e}"));
        let want = if label == "job" {
            "ankusa"
        } else {
            admin.as_str()
        };
        assert_eq!(values, serde_json::json!([want]), "variable {name}");
    }

    // Every rule is loaded and evaluates without error.
    let rules = alert_rules();
    let loaded = until("every rule evaluated", LONG, async || {
        let data = prom.api("/api/v1/rules", &[]).await.ok()?;
        let loaded: Vec<Value> = data["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let evaluated = loaded.len() == rules.len()
            && loaded.iter().all(|r| {
                r["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001-"))
            });
        evaluated.then_some(loaded)
    })
    .await;
    for r in &loaded {
        assert_eq!(r["health"], "ok", "rule {}: {}", r["name"], r["lastError"]);
        assert_eq!(r["type"], "alerting", "{}", r["name"]);
    }
    let names: Vec<&Value> = loaded.iter().map(|r| &r["name"]).collect();
    let want: Vec<&Value> = rules.iter().map(|r| &r["alert"]).collect();
    assert_eq!(names, want);
}

#[test]
fn the_promql_lexer_finds_selectors_and_skips_the_rest() {
    let s = selectors(
        r#"histogram_quantile(0.99, sum by (sink, le) (rate(ankusa_x_bucket{job=~"$job", state!="a,b}"}[$__rate_interval]))) / on (instance) group_left ankusa_y offset 5m > bool 0.5"#,
    );
    assert_eq!(
        s,
        vec![
            Selector {
                metric: "ankusa_x_bucket".into(),
                matchers: vec![
                    Matcher {
                        label: "job".into(),
                        op: "=~".into(),
                        value: "$job".into()
                    },
                    Matcher {
                        label: "state".into(),
                        op: "!=".into(),
                        value: "a,b}".into()
                    },
                ],
            },
            Selector {
                metric: "ankusa_y".into(),
                matchers: vec![]
            },
        ]
    );
    assert_eq!(small_regex_matches("5..", "503"), Some(true));
    assert_eq!(small_regex_matches("5..", "429"), Some(false));
    assert_eq!(small_regex_matches("delivered|retry", "retry"), Some(true));
    assert_eq!(small_regex_matches("5.*", "503"), None);
}

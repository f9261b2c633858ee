//! The log lines: `node.log_format: json` and `serve --log-format`, `RUST_LOG`
//! filtering in both formats, and the `ingest` and `delivery` spans (debug)
//! with their fields, through the real binary and a recording HTTP sink
//! (README, "Logs").

use std::time::Duration;

use serde_json::Value;

use crate::relay::Relay;
use crate::sink::{Reply, Sink, until};

const LONG: Duration = Duration::from_secs(120);
const JSON: (&str, &str) = ("content-type", "application/json");
/// An ordering key that must never reach a log line (it may be personal data).
const SECRET_KEY: &str = "customer-4711@example.com";

/// One tenant, one source with an ordered HTTP sink keyed by `x-entity-id`;
/// `log_format` is `node.log_format`. Fast retries, a breaker that does not
/// open.
fn template(sink: &Sink, log_format: &str) -> String {
    format!(
        "node: {{data_dir: '{{DATA}}', store: memory, log_format: {log_format}}}
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

/// The complete lines of `log` (a line still being written has no newline
/// yet and is left out).
fn lines(log: &str) -> Vec<&str> {
    let mut v: Vec<&str> = log
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(str::trim_end)
        .collect();
    v.retain(|l| !l.is_empty());
    v
}

/// Every complete line of `log` as JSON; panics naming the first that is not.
fn parsed(log: &str) -> Vec<Value> {
    lines(log)
        .into_iter()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {l}\n--- log:\n{log}"))
        })
        .collect()
}

/// The close lines of the spans named `name` (`FmtSpan::CLOSE`: one line a
/// span, its fields under `span`), as that `span` object.
fn closed(lines: &[Value], name: &str) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["fields"]["message"] == "close" && l["span"]["name"] == name)
        .map(|l| l["span"].clone())
        .collect()
}

/// JSON logs with `RUST_LOG=info,ankusa=debug`: every line parses; each
/// hook's `ingest` span has its source, tenant, status 200, seq and a
/// duration; each attempt's `delivery` span has the sink kind and name, the
/// tenant, its attempt number, `ordered`, the committed outcome (`retry` then
/// `delivered` for the hook the receiver refused once) and a duration; the
/// ordering key is in no line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_carry_the_ingest_and_delivery_spans() {
    // The receiver refuses the first request of hook 1 with a 503.
    let sink = Sink::start(|r| {
        if r.json()["i"] == 1 && r.attempt() == 1 {
            Reply::Status(503)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let relay = Relay::start_with_env(
        &template(&sink, "json"),
        &[("RUST_LOG", "info,ankusa=debug")],
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
    // Three first attempts and one retry, each committed: four delivery
    // spans closed (they close when the committer is done with them).
    let log = until(
        "four delivery spans and three ingest spans in the log",
        LONG,
        async || {
            let log = relay.log();
            let l = parsed(&log);
            (closed(&l, "delivery").len() >= 4 && closed(&l, "ingest").len() >= 3).then_some(log)
        },
    )
    .await;
    assert_eq!(sink.delivered().len(), 3, "{:?}", sink.requests());
    let all = parsed(&log);
    assert!(
        all.iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string()),
        "{log}"
    );
    assert!(
        !log.contains(SECRET_KEY),
        "the ordering key is in the log:\n{log}"
    );

    let ingest = closed(&all, "ingest");
    assert_eq!(ingest.len(), 3, "{log}");
    let mut seqs = Vec::new();
    for s in &ingest {
        assert_eq!(s["source"], "orders", "{s}");
        assert_eq!(s["tenant"], "acme", "{s}");
        assert_eq!(s["status"], 200, "{s}");
        assert!(s["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{s}");
        seqs.push(
            s["seq"]
                .as_u64()
                .unwrap_or_else(|| panic!("ingest span without a seq: {s}")),
        );
    }
    // The posts were one after the other: their seqs rise in post order.
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 3, "{seqs:?}");
    let refused = seqs[1];

    let delivery = closed(&all, "delivery");
    assert_eq!(delivery.len(), 4, "{log}");
    for s in &delivery {
        assert_eq!(s["sink_kind"], "http", "{s}");
        assert_eq!(s["sink"], "web", "{s}");
        assert_eq!(s["source"], "orders", "{s}");
        assert_eq!(s["tenant"], "acme", "{s}");
        assert_eq!(s["ordered"], true, "{s}");
        assert!(s["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{s}");
    }
    // (seq, attempt, outcome) of every attempt, in the order they closed.
    let attempts: Vec<(u64, u64, String)> = delivery
        .iter()
        .map(|s| {
            (
                s["seq"].as_u64().unwrap_or_else(|| panic!("no seq: {s}")),
                s["attempt"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("no attempt: {s}")),
                s["outcome"]
                    .as_str()
                    .unwrap_or_else(|| panic!("no outcome: {s}"))
                    .to_owned(),
            )
        })
        .collect();
    let of = |seq: u64| {
        attempts
            .iter()
            .filter(|a| a.0 == seq)
            .map(|a| (a.1, a.2.as_str()))
            .collect::<Vec<_>>()
    };
    assert_eq!(of(seqs[0]), [(1, "delivered")], "{attempts:?}");
    assert_eq!(
        of(refused),
        [(1, "retry"), (2, "delivered")],
        "{attempts:?}"
    );
    assert_eq!(of(seqs[2]), [(1, "delivered")], "{attempts:?}");
    // An event inside a span carries it: each "hook accepted" line is in
    // its request's ingest span, with the same seq.
    let accepted: Vec<&Value> = all
        .iter()
        .filter(|l| l["fields"]["message"] == "hook accepted")
        .collect();
    assert_eq!(accepted.len(), 3, "{log}");
    for l in accepted {
        assert_eq!(l["span"]["name"], "ingest", "{l}");
        assert_eq!(l["span"]["seq"], l["fields"]["seq"], "{l}");
        assert_eq!(l["spans"][0]["name"], "ingest", "{l}");
    }
}

/// `node.log_format: json` with `RUST_LOG=info` (the default filter): JSON
/// lines, and no `ingest` or `delivery` span once the hook is delivered (they
/// are debug). Then `--log-format text` overrides the file and
/// `RUST_LOG=info,ankusa=debug` turns the spans on: no line is JSON, and the
/// spans' close lines carry their fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flag_overrides_the_file_and_rust_log_filters_text_lines() {
    let sink = Sink::ok().await;
    let mut relay = Relay::start_with_env(&template(&sink, "json"), &[("RUST_LOG", "info")]).await;
    // The first run: JSON from the file, info only.
    relay
        .post(
            "/hooks/orders",
            &[JSON, ("x-entity-id", SECRET_KEY)],
            "{\"i\":0}",
        )
        .await
        .id();
    until("the first hook delivered", LONG, async || {
        (sink.delivered().len() == 1).then_some(())
    })
    .await;
    let first = relay.log();
    let l = parsed(&first);
    assert!(
        l.iter().any(|l| l["level"] == "INFO"
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("file-descriptor limit"))),
        "{first}"
    );
    assert!(
        closed(&l, "ingest").is_empty() && closed(&l, "delivery").is_empty(),
        "{first}"
    );

    relay.kill();
    relay.set_args(&["--log-format", "text"]);
    relay.set_env(&[("RUST_LOG", "info,ankusa=debug")]);
    relay.restart().await;
    relay
        .post(
            "/hooks/orders",
            &[JSON, ("x-entity-id", SECRET_KEY)],
            "{\"i\":1}",
        )
        .await
        .id();
    let log = until("a delivery span in the text log", LONG, async || {
        let log = relay.log();
        lines(&log)
            .iter()
            .any(|l| l.contains("delivery{") && l.contains("outcome=\"delivered\""))
            .then_some(log)
    })
    .await;
    assert!(
        lines(&log)
            .iter()
            .all(|l| serde_json::from_str::<Value>(l).is_err()),
        "{log}"
    );
    let ingest = lines(&log)
        .into_iter()
        .find(|l| l.contains("ingest{") && l.contains("close"))
        .unwrap_or_else(|| panic!("no ingest span:\n{log}"));
    assert!(
        ingest.contains("source=orders")
            && ingest.contains("tenant=acme")
            && ingest.contains("status=200"),
        "{ingest}"
    );
    let delivery = lines(&log)
        .into_iter()
        .find(|l| l.contains("delivery{") && l.contains("close"))
        .unwrap_or_else(|| panic!("no delivery span:\n{log}"));
    for f in [
        "sink_kind=\"http\"",
        "sink=web",
        "tenant=acme",
        "attempt=1",
        "ordered=true",
        "outcome=\"delivered\"",
    ] {
        assert!(delivery.contains(f), "{f} not in {delivery}");
    }
    assert!(
        !log.contains(SECRET_KEY),
        "the ordering key is in the log:\n{log}"
    );
}

/// A build without the cargo feature `otel` (the default) says so: it
/// refuses `node.otel` by name (`check-config` and `serve`, exit 2), and a
/// relay started with `OTEL_EXPORTER_OTLP_ENDPOINT` set warns that it exports
/// nothing, and runs.
#[cfg(not(feature = "otel"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_without_otel_says_it_has_no_otel_export() {
    use std::ffi::OsStr;
    let sink = Sink::ok().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = template(&sink, "text")
        .replace(
            "log_format: text}",
            "log_format: text, otel: {endpoint: 'http://127.0.0.1:4318'}}",
        )
        .replace("{DATA}", &dir.path().join("data").display().to_string())
        .replace("{INGEST}", "127.0.0.1:0")
        .replace("{ADMIN}", "127.0.0.1:0");
    assert!(yaml.contains("otel: {endpoint"), "{yaml}");
    let file = dir.path().join("relay.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let refusal = "node: option \"otel\": this build has no OTel export (ankusa was built without the cargo feature `otel`): \
                   build it with `--features otel`, or remove node.otel";
    for cmd in [
        &[OsStr::new("check-config"), file.as_os_str()][..],
        &[
            OsStr::new("serve"),
            OsStr::new("--config"),
            file.as_os_str(),
        ],
    ] {
        let (status, out) = crate::relay::run_cli(cmd, dir.path());
        assert_eq!(status.code(), Some(2), "{cmd:?}: {out}");
        assert!(out.contains(refusal), "{cmd:?}: {out}");
    }

    let relay = Relay::start_with_env(
        &template(&sink, "text"),
        &[
            ("RUST_LOG", "info"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
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
    let log = relay.log();
    let line = log
        .lines()
        .find(|l| l.contains("OTEL_EXPORTER_OTLP_ENDPOINT is set"))
        .unwrap_or_else(|| panic!("no warning about OTEL_EXPORTER_OTLP_ENDPOINT:\n{log}"));
    assert!(
        line.contains("WARN")
            && line.contains("but this build has no OTel export (ankusa was built without the cargo feature `otel`): no spans are exported"),
        "{line}"
    );
}

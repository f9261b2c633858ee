//! The attempt log end to end (docs/design.md section 3, "The attempt
//! log"): a receiver answering 503 with a body twice, then 200, and
//! `ankusa hooks show ID --json` lists the delivered row's three attempts
//! with their statuses, durations, bodies and headers; the table prints
//! them too; with `node.attempt_log.enabled: false` nothing is kept.

use std::time::Duration;

use serde_json::Value;

use crate::admin::{Admin, cli};
use crate::relay::Relay;
use crate::sink::{Reply, Sink, until};

const LONG: Duration = Duration::from_secs(120);

/// One source `orders` of tenant `default` delivering to `sink`, retried
/// quickly; `attempt_log` is the `node.attempt_log` section's flow mapping.
fn relay_config(sink: &Sink, attempt_log: &str) -> String {
    format!(
        "node: {{data_dir: '{{DATA}}', store: memory, attempt_log: {attempt_log}}}
listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}'}}
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 100000, open_ms: 10}}
tenants: [{{name: default}}]
sources:
  - name: orders
    tenant: default
    sinks:
      - {{type: http, name: web, url: '{url}', timeout_ms: 60000}}
",
        url = sink.url()
    )
}

/// 503 "overloaded 0", 503 "overloaded 1", then 200 `{"ok":true}`.
async fn flaky_receiver() -> Sink {
    Sink::start(|r| {
        if r.n < 2 {
            Reply::Body(503, format!("overloaded {}", r.n))
        } else {
            Reply::Body(200, "{\"ok\":true}".into())
        }
    })
    .await
}

/// Posts one hook and waits until it is delivered; returns its id.
async fn one_delivered(relay: &Relay, api: &Admin) -> String {
    let id = relay
        .post(
            "/hooks/orders",
            &[("content-type", "application/json")],
            "{\"n\":1}",
        )
        .await
        .id();
    until("the hook delivered", LONG, async || {
        (api.tenant("default").await["counters"]["delivered_total"] == 1).then_some(())
    })
    .await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_show_lists_the_three_attempts_of_a_delivered_row() {
    let sink = flaky_receiver().await;
    let relay = Relay::start(&relay_config(&sink, "{}")).await;
    let api = Admin::new(&relay, None);
    let id = one_delivered(&relay, &api).await;
    assert_eq!(sink.request_count(), 3);
    let admin = format!("http://{}", relay.admin);

    let (code, out, err) = cli(&["hooks", "show", &id, "--admin", &admin, "--json"], None);
    assert_eq!(code, 0, "{err}");
    let hook: Value = serde_json::from_str(&out).expect("hooks show --json");
    // The delivered row is gone; its log is there.
    assert_eq!(
        hook["deliveries"].as_array().map(Vec::len),
        Some(0),
        "{hook}"
    );
    let logs = hook["attempt_log"].as_array().expect("attempt_log");
    assert_eq!(logs.len(), 1, "{hook}");
    let log = &logs[0];
    assert_eq!(
        (
            log["id"].as_str(),
            log["sink"].as_str(),
            log["state"].as_str()
        ),
        (Some("default.1.0"), Some("web"), Some("delivered")),
        "{log}"
    );
    let attempts = log["attempts"].as_array().expect("attempts");
    let seen: Vec<(u64, u64, &str, &str)> = attempts
        .iter()
        .map(|a| {
            (
                a["attempt"].as_u64().expect("attempt"),
                a["status"].as_u64().expect("status"),
                a["outcome"].as_str().expect("outcome"),
                a["response_body"].as_str().expect("response_body"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, 503, "retry", "overloaded 0"),
            (2, 503, "retry", "overloaded 1"),
            (3, 200, "delivered", "{\"ok\":true}"),
        ]
    );
    let mut last_at = 0;
    for a in attempts {
        // A duration is measured (the loopback call takes a few ms or
        // less: a whole number, never asserted beyond being one), times go
        // forward, the receiver's headers are kept, no body was cut.
        assert!(a["duration_ms"].as_u64().is_some(), "{a}");
        let at = a["at_ms"].as_u64().expect("at_ms");
        assert!(at >= last_at, "{a}");
        last_at = at;
        assert!(a["at"].as_str().is_some(), "{a}");
        let header = |name: &str| {
            a["response_headers"]
                .as_array()
                .expect("response_headers")
                .iter()
                .find(|h| h["name"] == name)
                .and_then(|h| h["value"].as_str())
                .map(str::to_owned)
        };
        let body = a["response_body"].as_str().expect("body");
        assert_eq!(header("content-type").as_deref(), Some("text/plain"), "{a}");
        assert_eq!(
            header("content-length"),
            Some(body.len().to_string()),
            "{a}"
        );
        assert_eq!(a["response_body_base64"], Value::Null, "{a}");
        assert_eq!(a["response_body_truncated"], false, "{a}");
    }
    assert_eq!(
        attempts[0]["error"],
        "HTTP 503 Service Unavailable: overloaded 0"
    );
    assert_eq!(attempts[2]["error"], Value::Null);

    // The API's answer, held to the OpenAPI document's schema, is the same.
    let answer = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{id}"),
            None,
        )
        .await;
    assert_eq!(answer, hook);

    // The table shows them as well.
    let (code, out, err) = cli(&["hooks", "show", &id, "--admin", &admin], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("attempts of default.1.0 (sink web, delivered)"),
        "{out}"
    );
    assert!(
        out.contains("overloaded 1") && out.contains("{\"ok\":true}"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_keeping_no_attempt_log_lists_none() {
    let sink = flaky_receiver().await;
    let relay = Relay::start(&relay_config(&sink, "{enabled: false}")).await;
    let api = Admin::new(&relay, None);
    let id = one_delivered(&relay, &api).await;
    let admin = format!("http://{}", relay.admin);
    let (code, out, err) = cli(&["hooks", "show", &id, "--admin", &admin, "--json"], None);
    assert_eq!(code, 0, "{err}");
    let hook: Value = serde_json::from_str(&out).expect("hooks show --json");
    assert_eq!(hook["attempt_log"], serde_json::json!([]), "{hook}");
    assert_eq!(sink.request_count(), 3, "the same three attempts were made");
}

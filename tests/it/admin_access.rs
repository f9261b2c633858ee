//! Who may use the admin API: the token guards every route but health and
//! readiness, and a relay without a token refuses other sites' pages and
//! rebound host names (on `/v1/` and `/metrics`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::admin::{Admin, two_sources, validate};
use crate::relay::{Relay, client};
use crate::sink::{Reply, Sink, until};

const LONG: Duration = Duration::from_secs(120);

/// The bearer token: missing, wrong, or right-length-wrong-bytes is 401 with
/// nothing changed; /healthz and /readyz are open; /metrics is open unless
/// `metrics_require_token`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_every_route_but_health_and_readiness() {
    const TOKEN: &str = "0123456789abcdef";
    let sink = Sink::start(|_| Reply::Status(400)).await;
    for require_metrics in [false, true] {
        let extra = format!(
            "listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}', admin_token: '{TOKEN}', metrics_require_token: {require_metrics}}}"
        );
        let yaml = two_sources(&sink, "memory", "")
            .replace("listeners: {ingest: '{INGEST}', admin: '{ADMIN}'}", &extra);
        let relay = Relay::start(&yaml).await;
        let good = Admin::new(&relay, Some(TOKEN));
        relay.post("/hooks/spare", &[], "{\"i\":1}").await.id();
        until("the hook dead", LONG, async || {
            (good.tenant("other").await["counters"]["dead"] == 1).then_some(())
        })
        .await;
        let before = good.tenant("other").await;
        let row = "other.1.0";
        for bad in [None, Some("wrong"), Some("0123456789abcdeX"), Some("")] {
            let api = Admin::new(&relay, bad);
            for (m, pattern, path) in [
                ("GET", "/v1/tenants", "/v1/tenants".to_owned()),
                ("GET", "/v1/dead-letters", "/v1/dead-letters".to_owned()),
                (
                    "POST",
                    "/v1/dead-letters/{id}/revive",
                    format!("/v1/dead-letters/{row}/revive"),
                ),
                (
                    "DELETE",
                    "/v1/dead-letters/{id}",
                    format!("/v1/dead-letters/{row}"),
                ),
                ("POST", "/v1/jobs", "/v1/jobs".to_owned()),
                ("GET", "/v1/openapi.json", "/v1/openapi.json".to_owned()),
            ] {
                let body = (m == "POST").then(|| json!({ "kind": "drop", "filter": {} }));
                let (status, e) = api.call(m, pattern, &path, body).await;
                assert_eq!(status, 401, "{bad:?} {m} {path}: {e}");
                assert_eq!(e["error"]["code"], "unauthorized");
                assert!(!e["error"]["message"].as_str().expect("message").is_empty());
            }
        }
        assert_eq!(
            good.tenant("other").await["counters"],
            before["counters"],
            "a refused request changed something"
        );
        assert_eq!(good.dead("").await.len(), 1);
        let jobs = good.ok("GET", "/v1/jobs", "/v1/jobs", None).await;
        assert_eq!(jobs["items"], json!([]));
        let http = client();
        for p in ["/healthz", "/readyz"] {
            let r = http
                .get(format!("http://{}{p}", relay.admin))
                .send()
                .await
                .expect(p);
            assert_eq!(r.status(), 200, "{p} without a token");
        }
        let m = http
            .get(format!("http://{}/metrics", relay.admin))
            .send()
            .await
            .expect("metrics");
        assert_eq!(
            m.status(),
            if require_metrics { 401 } else { 200 },
            "metrics_require_token {require_metrics}"
        );
        let m = http
            .get(format!("http://{}/metrics", relay.admin))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("metrics");
        assert_eq!(m.status(), 200);
        assert!(m.text().await.expect("text").contains("ankusa_dlq_dead 1"));
    }
}

/// Regression (brk16): a relay without a token (loopback only) took what
/// any web page in a browser on that machine can send: a cross-site
/// `text/plain` POST (no preflight) paused a source and started a
/// purge_tenant job, and a page whose name was pointed at 127.0.0.1 (DNS
/// rebinding, its own `Host`) read the API. Both are 403 `forbidden` with
/// nothing changed; the listener's own origin, `localhost`, IP hosts and
/// clients without `Origin` (the CLI) are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_without_a_token_refuses_other_sites_pages_and_rebound_host_names() {
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let relay = Relay::start(&two_sources(&sink, "memory", "")).await;
    let api = Admin::new(&relay, None);
    let http = client();
    let port = relay.admin.port();
    let send =
        async |method: &str, path: &str, headers: &[(&str, String)], body: &str| -> (u16, Value) {
            let mut req = http.request(
                reqwest::Method::from_bytes(method.as_bytes()).expect("method"),
                format!("http://{}{path}", relay.admin),
            );
            for (k, v) in headers {
                req = req.header(*k, v);
            }
            let resp = req.body(body.to_owned()).send().await.expect("send");
            let status = resp.status().as_u16();
            let text = resp.text().await.expect("body");
            (
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        };
    let evil = ("origin", "http://evil.example".to_owned());
    let plain = ("content-type", "text/plain;charset=UTF-8".to_owned());
    for (method, pattern, path, body) in [
        (
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/spare/pause",
            r#"{"reason": "csrf"}"#,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs",
            r#"{"kind": "purge_tenant", "filter": {"tenant": "other"}}"#,
        ),
        ("GET", "/v1/tenants", "/v1/tenants", ""),
    ] {
        let (status, v) = send(method, path, &[evil.clone(), plain.clone()], body).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{method} {path}: {v}"
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("another site") && m.contains("evil.example")),
            "{v}"
        );
        validate(method, pattern, 403, &v);
    }
    let source = api
        .ok("GET", "/v1/sources/{source}", "/v1/sources/spare", None)
        .await;
    assert_eq!(
        source["paused"], false,
        "a cross-site POST paused the source: {source}"
    );
    assert_eq!(
        api.ok("GET", "/v1/jobs", "/v1/jobs", None).await["items"],
        json!([]),
        "a cross-site POST started a job"
    );

    // A rebound name: the page's own Host (and Origin) on 127.0.0.1.
    let rebound = [
        ("host", format!("evil.example:{port}")),
        ("origin", format!("http://evil.example:{port}")),
    ];
    let (status, v) = send("GET", "/v1/tenants", &rebound[..1], "").await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Host \"evil.example")),
        "{v}"
    );
    validate("GET", "/v1/tenants", 403, &v);
    let (status, v) = send(
        "POST",
        "/v1/sources/spare/pause",
        &rebound,
        r#"{"reason": "rebound"}"#,
    )
    .await;
    assert_eq!(status, 403, "{v}");

    // The listener's own origin (the console's POSTs), localhost, no Origin.
    let own = ("origin", format!("http://{}", relay.admin));
    let (status, v) = send(
        "POST",
        "/v1/sources/spare/pause",
        &[own, ("content-type", "application/json".to_owned())],
        r#"{"reason": "maintenance"}"#,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        api.ok("GET", "/v1/sources/{source}", "/v1/sources/spare", None)
            .await["paused"],
        true
    );
    api.ok(
        "POST",
        "/v1/sources/{source}/resume",
        "/v1/sources/spare/resume",
        None,
    )
    .await;
    let (status, v) = send(
        "GET",
        "/v1/tenants",
        &[
            ("host", format!("localhost:{port}")),
            ("origin", format!("http://localhost:{port}")),
        ],
        "",
    )
    .await;
    assert_eq!(
        (status, v["items"].as_array().map(Vec::len)),
        (200, Some(2)),
        "{v}"
    );
    // /metrics is checked as /v1/ is: a rebound page must not read the
    // figures (tenants' backlogs, rates). A scraper on this machine names it
    // by IP or localhost (the listener binds loopback without a token).
    let (status, v) = send(
        "GET",
        "/metrics",
        &[("host", format!("evil.example:{port}"))],
        "",
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{v}"
    );
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let (status, v) = send("GET", "/metrics", &[("host", host.clone())], "").await;
        assert_eq!(status, 200, "{host}: {v}");
        assert!(
            v.as_str()
                .is_some_and(|t| t.contains("ankusa_queue_pending")),
            "{host}: {v}"
        );
    }
    // Health and readiness answer any Host (a probe may name the machine).
    let (status, _) = send(
        "GET",
        "/healthz",
        &[("host", format!("relay-box:{port}"))],
        "",
    )
    .await;
    assert_eq!(status, 200);
}

/// A client address that keeps sending wrong tokens (a guesser) is counted,
/// logged and slowed: past its free failures its requests are 429 with a
/// `Retry-After` (the document's error), `/metrics` counts every 401 and 429
/// it got, the log says how many failed, and another address with the right
/// token is served meanwhile. Before, a two-character token fell in 0.3 s at
/// 3,500 guesses a second on one connection, and nothing showed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_keeps_sending_wrong_tokens_is_counted_logged_and_slowed() {
    const TOKEN: &str = "guess-me-not-7f3a9c2e41";
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let extra =
        format!("listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}', admin_token: '{TOKEN}'}}");
    let yaml = two_sources(&sink, "memory", "")
        .replace("listeners: {ingest: '{INGEST}', admin: '{ADMIN}'}", &extra);
    let relay = Relay::start(&yaml).await;
    let guesser = Admin::new(&relay, Some("guess-0000000000000000"));
    let (mut refused, mut slowed) = (0u32, None);
    // Sequential requests on loopback: hundreds a second, far faster than
    // the one guess a second an address earns back.
    for _ in 0..500 {
        let (status, v) = guesser
            .call("GET", "/v1/tenants", "/v1/tenants", None)
            .await;
        match status {
            401 => refused += 1,
            429 => {
                slowed = Some(v);
                break;
            }
            other => panic!("a wrong token got {other}: {v}"),
        }
    }
    let slowed = slowed.expect("no 429 within 500 wrong tokens");
    assert!(refused >= 30, "slowed after only {refused} wrong tokens");
    assert_eq!(slowed["error"]["code"], "too_many_requests", "{slowed}");
    validate("GET", "/v1/tenants", 429, &slowed);
    let raw = client()
        .get(format!("http://{}/v1/tenants", relay.admin))
        .bearer_auth("guess-0000000000000001")
        .send()
        .await
        .expect("send");
    let mut throttled = 1.0;
    if raw.status() == 429 {
        throttled += 1.0;
        let after: u64 = raw.headers()["retry-after"]
            .to_str()
            .expect("ascii")
            .parse()
            .expect("whole seconds");
        assert!((1..=60).contains(&after), "Retry-After {after}");
    } else {
        assert_eq!(raw.status(), 401, "refilled meanwhile: one more guess");
        refused += 1;
    }
    // Another address (127.0.0.2 is loopback too) with the right token.
    let other = reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .expect("client");
    let ok = other
        .get(format!("http://{}/v1/tenants", relay.admin))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("send from 127.0.0.2");
    assert_eq!(ok.status(), 200);
    let m = relay.metrics().await;
    assert_eq!(
        m["ankusa_admin_auth_failures_total"],
        f64::from(refused),
        "{m:?}"
    );
    assert_eq!(m["ankusa_admin_auth_throttled_total"], throttled, "{m:?}");
    let log = relay.log();
    assert!(
        log.contains("refused for a missing or wrong bearer token")
            && log.contains("client=127.0.0.1"),
        "{log}"
    );
}

//! Bad input to the admin API: every route answers a 4xx JSON error (and a
//! route without its token a 401), each validated against the OpenAPI
//! document.

use std::time::Duration;

use serde_json::{Value, json};

use crate::admin::{Admin, two_sources, validate};
use crate::relay::{Relay, client, config};
use crate::sink::{Reply, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);

const LONG: Duration = Duration::from_secs(120);

const JSON: (&str, &str) = ("content-type", "application/json");

/// Bad input to every route is a 4xx with `{"error": {code, message}}`,
/// never a 5xx, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_to_every_route_is_a_4xx_json_error() {
    let sink = Sink::start(|_| Reply::Status(400)).await;
    let relay = Relay::start(&two_sources(&sink, "memory", "")).await;
    let api = Admin::new(&relay, None);
    relay.post("/hooks/spare", &[], "{\"i\":1}").await.id();
    until("the hook dead", LONG, async || {
        (api.tenant("other").await["counters"]["dead"] == 1).then_some(())
    })
    .await;
    let before = api.tenant("other").await;
    let v4 = "2f1b6c1e-8a55-4c1a-9d2e-3b7c1d0e5f6a";
    let cases: Vec<(&str, &str, String, Option<Value>, u16)> = vec![
        (
            "GET",
            "/v1/tenants/{tenant}",
            "/v1/tenants/nobody".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/tenants",
            "/v1/tenants?cursor=%21%21".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants",
            "/v1/tenants?limit=1000000000".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants",
            "/v1/tenants?limit=0".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants",
            "/v1/tenants?colour=red".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/abc".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/nobody/hooks/1".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/99999".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/hooks/{idempotency_key}",
            "/v1/hooks/not-a-uuid".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/hooks/{idempotency_key}",
            format!("/v1/hooks/{v4}"),
            None,
            400,
        ),
        (
            "GET",
            "/v1/hooks/{idempotency_key}",
            "/v1/hooks/01890a5d-ac96-7b3c-8d2e-3b7c1d0e5f6a".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/sources/{source}",
            "/v1/sources/nope".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/sources",
            "/v1/sources?cursor=AQEx".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/dead-letters",
            "/v1/dead-letters?tenant=nobody".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/dead-letters",
            "/v1/dead-letters?source=nope".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/dead-letters",
            "/v1/dead-letters?sink=nope".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/dead-letters",
            "/v1/dead-letters?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/dead-letters",
            "/v1/dead-letters?since=5&until=5".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/dead-letters",
            "/v1/dead-letters?since=yesterday".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/dead-letters",
            "/v1/dead-letters?limit=1000000000".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/dead-letters",
            "/v1/dead-letters?cursor=zzzz".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/dead-letters/{id}",
            "/v1/dead-letters/bogus".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/dead-letters/{id}",
            "/v1/dead-letters/other.1.99".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/dead-letters/{id}/revive",
            "/v1/dead-letters/x.y/revive".into(),
            None,
            400,
        ),
        (
            "POST",
            "/v1/dead-letters/{id}/revive",
            "/v1/dead-letters/nobody.1.0/revive".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/dead-letters/{id}/revive",
            "/v1/dead-letters/other.7.0/revive".into(),
            None,
            409,
        ),
        (
            "DELETE",
            "/v1/dead-letters/{id}",
            "/v1/dead-letters/nobody.1.0".into(),
            None,
            404,
        ),
        (
            "DELETE",
            "/v1/dead-letters/{id}",
            "/v1/dead-letters/other.2.0".into(),
            None,
            409,
        ),
        (
            "DELETE",
            "/v1/dead-letters/{id}",
            "/v1/dead-letters/other.1.70000".into(),
            None,
            400,
        ),
        ("GET", "/v1/jobs/{id}", "/v1/jobs/999".into(), None, 404),
        ("GET", "/v1/jobs/{id}", "/v1/jobs/first".into(), None, 400),
        (
            "POST",
            "/v1/jobs/{id}/cancel",
            "/v1/jobs/999/cancel".into(),
            None,
            404,
        ),
        ("GET", "/v1/jobs", "/v1/jobs?cursor=AQIx".into(), None, 400),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({ "kind": "explode" })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({ "kind": "revive", "extra": 1 })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!("not an object")),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({ "kind": "revive", "filter": { "tenant": "nobody" } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({ "kind": "drop", "filter": { "since": 9, "until": 3 } })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({ "kind": "drop", "filter": { "since": -1 } })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({ "kind": "drop", "filter": { "until": "soon" } })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({ "kind": "revive", "filter": { "source": "spare", "sink": "web" } })),
            404,
        ),
        // An empty field is not "every": a drop of tenant "" dropped every
        // tenant's dead letters (break-it pass).
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({ "kind": "drop", "filter": { "tenant": "" } })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({ "kind": "revive", "filter": { "reason": "" } })),
            400,
        ),
        // One row, one id: no sign, no leading zero.
        (
            "DELETE",
            "/v1/dead-letters/{id}",
            "/v1/dead-letters/other.+1.0".into(),
            None,
            400,
        ),
        (
            "POST",
            "/v1/dead-letters/{id}/revive",
            "/v1/dead-letters/other.01.0/revive".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/other/hooks/+1".into(),
            None,
            400,
        ),
        ("GET", "/v1/jobs/{id}", "/v1/jobs/01".into(), None, 400),
    ];
    for (m, pattern, path, body, want) in cases {
        let (status, e) = api.call(m, pattern, &path, body.clone()).await;
        assert_eq!(status, want, "{m} {path} {body:?}: {e}");
        assert!(
            !e["error"]["message"].as_str().expect("message").is_empty(),
            "{e}"
        );
    }
    // No route, a method a route does not answer, a body over 64 KiB.
    let http = client();
    let r = http
        .get(format!("http://{}/v1/nothing", relay.admin))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 404);
    let r = http
        .put(format!("http://{}/v1/tenants", relay.admin))
        .send()
        .await
        .expect("put");
    assert_eq!(r.status(), 405);
    assert_eq!(
        r.headers().get("allow").and_then(|v| v.to_str().ok()),
        Some("GET")
    );
    let e: Value = serde_json::from_str(&r.text().await.expect("text")).expect("json");
    assert_eq!(e["error"]["code"], "method_not_allowed");
    let r = http
        .post(format!("http://{}/v1/jobs", relay.admin))
        .body(vec![b' '; 70_000])
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 413);
    let e: Value = serde_json::from_str(&r.text().await.expect("text")).expect("json");
    validate("POST", "/v1/jobs", 413, &e);
    // Nothing changed, no job was made.
    assert_eq!(api.tenant("other").await["counters"], before["counters"]);
    assert_eq!(
        api.ok("GET", "/v1/jobs", "/v1/jobs", None).await["items"],
        json!([])
    );
    // The document itself is served.
    let doc = api
        .ok("GET", "/v1/openapi.json", "/v1/openapi.json", None)
        .await;
    assert_eq!(doc["openapi"], "3.1.0");
    let lists = api
        .ok("GET", "/v1/sources", "/v1/sources?limit=1", None)
        .await;
    assert_eq!(lists["items"][0]["name"], "orders");
    let next = lists["next_cursor"].as_str().expect("a second page");
    let page2 = api
        .ok(
            "GET",
            "/v1/sources",
            &format!("/v1/sources?limit=1&cursor={next}"),
            None,
        )
        .await;
    assert_eq!(
        (page2["items"][0]["name"].as_str(), &page2["next_cursor"]),
        (Some("spare"), &Value::Null)
    );
}

/// Every new route: unknown tenant, source or sink, an inverted range, a
/// malformed cursor, a huge limit, a release of a hook that is not
/// quarantined, bodies of the wrong shape: a 4xx with a message, never a 5xx,
/// and nothing changes; and 401 without the token on every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_no_token_on_every_new_route_are_4xx() {
    const TOKEN: &str = "operate-token-4c1d9e";
    let sink = Sink::ok().await;
    let relay = Relay::start(
        &config(
            "memory",
            &format!(
                "
tenants: [{{name: default}}]
sources:
  - name: shop
    tenant: default
    sinks: [{{type: http, name: ledger, url: '{url}'}}]
  - name: review
    tenant: default
    quarantine: true
    sinks: [{{type: http, name: web, url: '{url}'}}]
",
                url = sink.url()
            ),
        )
        .replace(
            "listeners: {ingest: '{INGEST}', admin: '{ADMIN}'}",
            &format!(
                "listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}', admin_token: '{TOKEN}'}}"
            ),
        ),
    )
    .await;
    let api = Admin::new(&relay, Some(TOKEN));
    relay.post("/hooks/shop", &[JSON], "{}").await.id();
    assert_eq!(relay.post("/hooks/review", &[JSON], "{}").await.status, 202);
    until("the shop hook delivered", WAIT, async || {
        (sink.delivered().len() == 1).then_some(())
    })
    .await;
    // The receiver has the hook before the relay commits its outcome: wait
    // for the commit, so that `before` is a state nothing is still changing.
    let before = until("the shop hook's delivery committed", WAIT, async || {
        let t = api.tenant("default").await;
        (t["counters"]["delivered_total"] == 1 && t["counters"]["in_flight"] == 0).then_some(t)
    })
    .await;
    let job = |v: Value| Some(v);
    let cases: Vec<(&str, &str, String, Option<Value>, u16)> = vec![
        (
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/nope/pause".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/shop/pause".into(),
            Some(json!({ "why": "x" })),
            400,
        ),
        (
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/shop/pause".into(),
            Some(json!("paused")),
            400,
        ),
        (
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/shop/pause?x=1".into(),
            None,
            400,
        ),
        (
            "POST",
            "/v1/sources/{source}/resume",
            "/v1/sources/nope/resume".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/resume",
            "/v1/sources/shop/resume".into(),
            None,
            409,
        ),
        (
            "POST",
            "/v1/sources/{source}/resume",
            "/v1/sources/shop/resume".into(),
            Some(json!({ "reason": "x" })),
            400,
        ),
        (
            "POST",
            "/v1/sources/{source}/sinks/{sink}/pause",
            "/v1/sources/shop/sinks/nope/pause".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/sinks/{sink}/pause",
            "/v1/sources/nope/sinks/ledger/pause".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/sinks/{sink}/resume",
            "/v1/sources/shop/sinks/nope/resume".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/sinks/{sink}/resume",
            "/v1/sources/shop/sinks/ledger/resume".into(),
            None,
            409,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/nobody/quarantine".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine?cursor=%21%21".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine?cursor=AQEx".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine?limit=1000000".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine?source=nope".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/x".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/999".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/1".into(),
            None,
            409,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/nobody/quarantine/2".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/1/release".into(),
            None,
            409,
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/999/release".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/-1/release".into(),
            None,
            400,
        ),
        (
            "DELETE",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/1".into(),
            None,
            409,
        ),
        (
            "DELETE",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/nobody/quarantine/2".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "replay", "filter": { "source": "shop" } })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "replay", "filter": { "since": 1 } })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "replay", "filter": { "source": "nope", "since": 1 } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 9, "until": 3 } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z" } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 1, "reason": "x" } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 1 }, "sinks": ["nope"] }),
            ),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 1 }, "sinks": [] }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 1, "tenant": "nobody" } }),
            ),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "revive", "sinks": ["ledger"] })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "purge_tenant" })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "purge_tenant", "filter": { "tenant": "nobody" } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "purge_tenant", "filter": { "tenant": "default", "source": "shop" } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "dead_letter_source" })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "dead_letter_source", "filter": { "source": "nope" } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "dead_letter_source", "filter": { "source": "shop", "since": 1 } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "release_quarantined", "filter": { "source": "nope" } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "drop_quarantined", "filter": { "tenant": "nobody" } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "drop_quarantined", "filter": { "reason": "x" } })),
            400,
        ),
    ];
    for (m, pattern, path, body, want) in cases {
        let (status, e) = api.call(m, pattern, &path, body.clone()).await;
        assert_eq!(status, want, "{m} {path} {body:?}: {e}");
        assert!(
            !e["error"]["message"].as_str().expect("message").is_empty(),
            "{e}"
        );
    }
    // Nothing changed, no job was made, nothing is paused.
    assert_eq!(api.tenant("default").await["counters"], before["counters"]);
    assert_eq!(
        api.ok("GET", "/v1/jobs", "/v1/jobs", None).await["items"],
        json!([])
    );
    assert_eq!(
        api.ok("GET", "/v1/sources/{source}", "/v1/sources/shop", None)
            .await["paused"],
        false
    );

    // The token, on every new route.
    for bad in [None, Some("wrong")] {
        let anon = Admin::new(&relay, bad);
        for (m, pattern, path) in [
            (
                "POST",
                "/v1/sources/{source}/pause",
                "/v1/sources/shop/pause",
            ),
            (
                "POST",
                "/v1/sources/{source}/resume",
                "/v1/sources/shop/resume",
            ),
            (
                "POST",
                "/v1/sources/{source}/sinks/{sink}/pause",
                "/v1/sources/shop/sinks/ledger/pause",
            ),
            (
                "POST",
                "/v1/sources/{source}/sinks/{sink}/resume",
                "/v1/sources/shop/sinks/ledger/resume",
            ),
            (
                "GET",
                "/v1/tenants/{tenant}/quarantine",
                "/v1/tenants/default/quarantine",
            ),
            (
                "GET",
                "/v1/tenants/{tenant}/quarantine/{seq}",
                "/v1/tenants/default/quarantine/2",
            ),
            (
                "DELETE",
                "/v1/tenants/{tenant}/quarantine/{seq}",
                "/v1/tenants/default/quarantine/2",
            ),
            (
                "POST",
                "/v1/tenants/{tenant}/quarantine/{seq}/release",
                "/v1/tenants/default/quarantine/2/release",
            ),
            ("POST", "/v1/jobs", "/v1/jobs"),
        ] {
            let body = (path == "/v1/jobs")
                .then(|| json!({ "kind": "purge_tenant", "filter": { "tenant": "default" } }));
            let (status, e) = anon.call(m, pattern, path, body).await;
            assert_eq!(status, 401, "{bad:?} {m} {path}: {e}");
            assert_eq!(e["error"]["code"], "unauthorized");
        }
    }
    assert_eq!(
        api.tenant("default").await["counters"],
        before["counters"],
        "a refused request changed something"
    );
    assert_eq!(
        api.ok(
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine",
            None
        )
        .await["items"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

//! The admin API and the operator's CLI through the real binary
//! (docs/design.md section 5, "Admin API"; ADR 0004 section 4.8): a dead lane
//! head found by every filter and revived behind the lane's current head; a
//! 10,000-row revive job killed with SIGKILL mid-way and finished after the
//! restart; the bearer token; bad input on every route; the CLI's JSON and exit
//! codes. Every JSON answer is validated against the OpenAPI document's schema
//! for its route and status.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::relay::{BIN, Relay, client, config};
use crate::sink::{Reply, Sink, lane, until};

const OPENAPI: &str = include_str!("../../admin/src/http/openapi.json");
const LONG: Duration = Duration::from_secs(120);

/// Validates `body` against the schema of `(method, pattern, status)` in the
/// OpenAPI document (its `$ref`s resolved against the whole document).
pub(crate) fn validate(method: &str, pattern: &str, status: u16, body: &Value) {
    let doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json");
    let esc = pattern.replace('~', "~0").replace('/', "~1");
    let pointer = format!(
        "#/paths/{esc}/{}/responses/{status}/content/application~1json/schema",
        method.to_ascii_lowercase()
    );
    assert!(
        doc.pointer(&pointer[1..]).is_some(),
        "openapi.json documents no JSON answer {status} for {method} {pattern}: {body}"
    );
    let mut root = doc.clone();
    // A URI fragment: `{` and `}` of path templates percent-encoded.
    root["$ref"] = json!(pointer.replace('{', "%7B").replace('}', "%7D"));
    let v = jsonschema::draft202012::new(&root).expect("schema compiles");
    let errors: Vec<String> = v
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {pattern} {status}: {errors:?}\n{body:#}"
    );
}

/// A client of one relay's admin API, validating every answer.
pub(crate) struct Admin {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Admin {
    pub(crate) fn new(relay: &Relay, token: Option<&str>) -> Admin {
        Admin {
            base: format!("http://{}", relay.admin),
            token: token.map(str::to_owned),
            http: client(),
        }
    }

    /// `method path` (with `pattern`, its route, for the schema): status and
    /// JSON body.
    pub(crate) async fn call(
        &self,
        method: &str,
        pattern: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(
            reqwest::Method::from_bytes(method.as_bytes()).expect("method"),
            format!("{}{path}", self.base),
        );
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: {status} not JSON: {text}"));
        validate(method, pattern, status, &v);
        (status, v)
    }

    pub(crate) async fn ok(
        &self,
        method: &str,
        pattern: &str,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let (status, v) = self.call(method, pattern, path, body).await;
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {v}"
        );
        v
    }

    pub(crate) async fn dead(&self, query: &str) -> Vec<Value> {
        let v = self
            .ok(
                "GET",
                "/v1/dead-letters",
                &format!("/v1/dead-letters?{query}"),
                None,
            )
            .await;
        v["items"].as_array().expect("items").clone()
    }

    pub(crate) async fn tenant(&self, name: &str) -> Value {
        self.ok(
            "GET",
            "/v1/tenants/{tenant}",
            &format!("/v1/tenants/{name}"),
            None,
        )
        .await
    }

    pub(crate) async fn job(&self, id: u64) -> Value {
        self.ok("GET", "/v1/jobs/{id}", &format!("/v1/jobs/{id}"), None)
            .await
    }
}

fn two_sources(sink: &Sink, store: &str, extra: &str) -> String {
    config(
        store,
        &format!(
            "{extra}
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 100000, open_ms: 10}}
tenants: [{{name: default}}, {{name: other}}]
sources:
  - name: orders
    tenant: default
    sinks:
      - {{type: http, name: web, url: '{url}', timeout_ms: 60000, ordered: true, ordering_key: {{header: x-entity-id}}}}
  - name: spare
    tenant: other
    sinks:
      - {{type: http, name: backup, url: '{url}', timeout_ms: 60000}}
",
            url = sink.url()
        ),
    )
}

fn index_of(r: &crate::sink::Req) -> u64 {
    r.json()["i"]
        .as_u64()
        .unwrap_or_else(|| panic!("request {} has no i", r.n))
}

/// ADR 0004 section 4.8 through the API: lane head 0 dead-lettered (410),
/// found by each filter (and by none that does not match), revived while hook
/// 1 is the lane's head with 2 and 3 waiting: it runs after 1 and before 2
/// and 3, delivered once; a second revive is a 409 that changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lane_head_is_listed_by_every_filter_and_revived_behind_the_current_head() {
    let gone = Arc::new(AtomicBool::new(true));
    let g = Arc::clone(&gone);
    let sink = Sink::start(move |r| match index_of(r) {
        0 if g.swap(false, Ordering::SeqCst) => Reply::Status(410),
        1 => Reply::Hold,
        _ => Reply::Status(200),
    })
    .await;
    let relay = Relay::start(&two_sources(&sink, "memory", "")).await;
    let api = Admin::new(&relay, None);
    let post = |i: u64| {
        let relay = &relay;
        async move {
            relay
                .post(
                    "/hooks/orders",
                    &[
                        ("content-type", "application/json"),
                        ("x-entity-id", "cust-9"),
                    ],
                    format!("{{\"i\":{i}}}"),
                )
                .await
                .id()
        }
    };
    let id0 = post(0).await;
    until("hook 0 dead-lettered", LONG, async || {
        (api.tenant("default").await["counters"]["dead"] == 1).then_some(())
    })
    .await;
    let mut ids = vec![id0.clone()];
    for i in 1..4 {
        ids.push(post(i).await);
    }
    until(
        "hook 1 held at the sink as the lane's head",
        LONG,
        async || (sink.open(&lane("default", "orders", "cust-9")) == 1).then_some(()),
    )
    .await;

    // The dead letter, and the hook it belongs to.
    let all = api.dead("").await;
    assert_eq!(all.len(), 1, "{all:?}");
    let d = &all[0];
    let row = d["id"].as_str().expect("id").to_owned();
    assert_eq!(row, "default.1.0");
    assert_eq!(
        (
            d["tenant"].as_str(),
            d["source"].as_str(),
            d["sink"].as_str()
        ),
        (Some("default"), Some("orders"), Some("web"))
    );
    assert_eq!(d["idempotency_key"].as_str(), Some(id0.as_str()));
    assert_eq!(d["ordering_key"].as_str(), Some("cust-9"));
    assert!(
        d["reason"]
            .as_str()
            .expect("reason")
            .starts_with("sink gone"),
        "{d}"
    );
    let dead_at = d["dead_at_ms"].as_u64().expect("dead_at_ms");
    let hook = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{id0}"),
            None,
        )
        .await;
    assert_eq!(
        (hook["tenant"].as_str(), hook["seq"].as_u64()),
        (Some("default"), Some(1))
    );
    assert_eq!(hook["body_text"].as_str(), Some("{\"i\":0}"));
    assert_eq!(hook["deliveries"][0]["state"].as_str(), Some("dead"));
    assert_eq!(hook["deliveries"][0]["lane_position"], Value::Null);
    let by_seq = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/1",
            None,
        )
        .await;
    assert_eq!(by_seq, hook);
    let head = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/2",
            None,
        )
        .await;
    assert_eq!(
        (
            head["deliveries"][0]["state"].as_str(),
            head["deliveries"][0]["lane_position"].as_str()
        ),
        (Some("in_flight"), Some("head"))
    );
    let member = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/3",
            None,
        )
        .await;
    assert_eq!(
        member["deliveries"][0]["lane_position"].as_str(),
        Some("member")
    );

    // Each filter finds it; each that does not match finds nothing.
    let since = dead_at.to_string();
    let until_ms = (dead_at + 1).to_string();
    for (q, n) in [
        ("tenant=default".to_owned(), 1),
        ("tenant=other".to_owned(), 0),
        ("source=orders".to_owned(), 1),
        ("source=spare".to_owned(), 0),
        ("sink=web".to_owned(), 1),
        ("sink=backup".to_owned(), 0),
        ("reason=sink%20gone".to_owned(), 1),
        ("reason=permanent".to_owned(), 0),
        (format!("since={since}"), 1),
        (format!("since={until_ms}"), 0),
        (format!("until={until_ms}"), 1),
        (format!("until={since}"), 0),
        (
            format!(
                "since={since}&until={until_ms}&tenant=default&source=orders&sink=web&reason=sink"
            ),
            1,
        ),
    ] {
        let got = api.dead(&q).await;
        assert_eq!(got.len(), n, "filter {q}: {got:?}");
        if n == 1 {
            assert_eq!(got[0]["id"].as_str(), Some(row.as_str()), "filter {q}");
        }
    }
    let shown = api
        .ok(
            "GET",
            "/v1/dead-letters/{id}",
            &format!("/v1/dead-letters/{row}"),
            None,
        )
        .await;
    assert_eq!(shown, all[0]);

    // Revive: a member behind head 1.
    let r = api
        .ok(
            "POST",
            "/v1/dead-letters/{id}/revive",
            &format!("/v1/dead-letters/{row}/revive"),
            None,
        )
        .await;
    assert_eq!(
        r,
        json!({ "id": row, "revived": true, "state": "lane_member" })
    );
    let t = api.tenant("default").await;
    assert_eq!(
        (
            t["counters"]["dead"].as_i64(),
            t["counters"]["lane_members"].as_i64(),
            t["counters"]["pending"].as_i64()
        ),
        (Some(0), Some(3), Some(4)),
        "{t}"
    );
    // A second revive is refused and changes nothing.
    let (status, e) = api
        .call(
            "POST",
            "/v1/dead-letters/{id}/revive",
            &format!("/v1/dead-letters/{row}/revive"),
            None,
        )
        .await;
    assert_eq!(status, 409);
    assert_eq!(e["error"]["code"], "conflict");
    assert!(
        e["error"]["message"]
            .as_str()
            .expect("message")
            .contains("not in the dead-letter queue"),
        "{e}"
    );
    assert_eq!(api.tenant("default").await["counters"], t["counters"]);
    assert_eq!(
        sink.requests().len(),
        2,
        "nothing but 0 (410) and the held 1 reached the sink"
    );

    sink.release();
    let got = until("every hook delivered", LONG, async || {
        (sink.delivered().len() >= 4).then(|| sink.requests())
    })
    .await;
    let order: Vec<u64> = got.iter().map(index_of).collect();
    assert_eq!(order, vec![0, 1, 0, 2, 3], "arrival order at the sink");
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for r in sink.delivered() {
        *per_key.entry(r.id()).or_default() += 1;
    }
    assert_eq!(per_key.len(), 4);
    assert!(per_key.values().all(|n| *n == 1), "{per_key:?}");
    assert_eq!(per_key.get(&id0), Some(&1));
    until("the tenant drained", LONG, async || {
        (api.tenant("default").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let t = api.tenant("default").await;
    assert_eq!(
        (
            t["counters"]["dead"].as_i64(),
            t["counters"]["delivered_total"].as_i64(),
            t["counters"]["lanes"].as_i64()
        ),
        (Some(0), Some(4), Some(0))
    );
    assert_eq!(api.dead("").await.len(), 0);
}

/// A sink entry paused in the configuration (docs/design.md section 5,
/// "Pause"): the tenant's other sink delivers, the paused sink's rows wait in
/// the held band, the hook view shows them `held` (a held lane head still its
/// lane's head), and the tenant's oldest due row is none of them; the
/// dispatch_paused gauge of the merged /metrics counts the entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sinks_rows_show_as_held_and_are_not_the_oldest_due() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
sources:
  - name: shop
    sinks:
      - {{type: http, name: ledger, url: '{url}', ordered: true, ordering_key: {{header: x-entity-id}}, paused: true}}
      - {{type: http, name: audit, url: '{url}2'}}
",
            url = sink.url()
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            relay
                .post(
                    "/hooks/shop",
                    &[
                        ("content-type", "application/json"),
                        ("x-entity-id", "cus_a"),
                    ],
                    format!("{{\"i\":{i}}}"),
                )
                .await
                .id(),
        );
    }
    let tenant = api.ok("GET", "/v1/tenants", "/v1/tenants", None).await["items"][0]["name"]
        .as_str()
        .expect("tenant")
        .to_owned();
    // The audit rows are delivered; the ledger's lane head is held once the
    // pipeline has met it: then no live due row is left. (The receiver has a
    // delivery before the relay commits it, and an in-flight row is not due
    // either: wait for the audit rows' commits, pending down to the ledger's 3.)
    let t = until(
        "the audit sink delivered and the ledger head is held",
        LONG,
        async || {
            let t = api.tenant(&tenant).await;
            (sink.delivered().len() == 3
                && t["oldest_due_at_ms"].is_null()
                && t["counters"]["pending"] == 3
                && t["counters"]["in_flight"] == 0)
                .then_some(t)
        },
    )
    .await;
    assert_eq!(
        (
            t["counters"]["pending"].as_i64(),
            t["counters"]["lanes"].as_i64(),
            t["counters"]["lane_members"].as_i64()
        ),
        (Some(3), Some(1), Some(2)),
        "{t}"
    );
    assert!(t["oldest_due_age_ms"].is_null(), "{t}");
    assert!(
        sink.requests().iter().all(|r| r.path == "/in2"),
        "the paused ledger sink was called"
    );
    let head = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{}", ids[0]),
            None,
        )
        .await;
    let ledger = head["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["sink"] == "ledger")
        .expect("the ledger row")
        .clone();
    assert_eq!(
        (ledger["state"].as_str(), ledger["lane_position"].as_str()),
        (Some("held"), Some("head")),
        "{head}"
    );
    let member = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{}", ids[1]),
            None,
        )
        .await;
    let ledger = member["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["sink"] == "ledger")
        .expect("the ledger row")
        .clone();
    assert_eq!(
        (ledger["state"].as_str(), ledger["lane_position"].as_str()),
        (Some("lane_member"), Some("member")),
        "{member}"
    );
    assert_eq!(relay.metrics().await["ankusa_dispatch_paused"], 1.0);
}

/// 10,000 dead rows revived by one job in bounded steps; the relay is
/// SIGKILLed while the job runs and restarted: the job resumes from its
/// stored cursor and finishes; every row is delivered exactly once (the sink
/// holds every delivery until the job is done, so nothing was in flight at
/// the kill) and the store's invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_revive_job_survives_a_sigkill_and_revives_each_row_once() {
    const N: usize = 10_000;
    let dying = Arc::new(AtomicBool::new(true));
    let d = Arc::clone(&dying);
    let sink = Sink::start(move |_| {
        if d.load(Ordering::SeqCst) {
            Reply::Status(400)
        } else {
            Reply::Hold
        }
    })
    .await;
    // 64 calls at once per sink: 10,000 deliveries twice (the 400s, then the
    // revived ones) go faster; nothing here depends on it.
    let mut relay = Relay::start(&two_sources(
        &sink,
        "rocksdb",
        "dispatch: {sink_concurrency: 64}",
    ))
    .await;
    let api = Admin::new(&relay, None);
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    let url = relay.url("/hooks/spare");
    let http = client();
    for i in 0..N {
        let (sem, url, http) = (Arc::clone(&sem), url.clone(), http.clone());
        tasks.spawn(async move {
            let _p = sem.acquire().await.expect("permit");
            let a = crate::relay::post(
                &http,
                &url,
                &[("content-type", "application/json")],
                format!("{{\"i\":{i}}}").into_bytes(),
            )
            .await
            .expect("post");
            a.id()
        });
    }
    let mut ids = std::collections::HashSet::new();
    while let Some(id) = tasks.join_next().await {
        ids.insert(id.expect("task"));
    }
    assert_eq!(ids.len(), N);
    until(
        "every row dead-lettered (HTTP 400)",
        Duration::from_secs(600),
        async || {
            (api.tenant("other").await["counters"]["dead"].as_u64() == Some(N as u64)).then_some(())
        },
    )
    .await;
    dying.store(false, Ordering::SeqCst);

    let job = api.ok("POST", "/v1/jobs", "/v1/jobs", Some(json!({ "kind": "revive", "filter": { "tenant": "other", "reason": "permanent: HTTP 400" } }))).await;
    let id = job["id"].as_u64().expect("job id");
    assert_eq!(
        (job["state"].as_str(), job["total"].as_u64()),
        (Some("running"), Some(N as u64))
    );
    // SIGKILL once the first step is committed and the job is still running.
    let seen = until("the job's first step", LONG, async || {
        let j = api.job(id).await;
        (j["state"] == "running" && j["done"].as_u64().unwrap_or(0) > 0).then_some(j)
    })
    .await;
    relay.kill();
    assert!(seen["done"].as_u64().expect("done") < N as u64);
    relay.restart().await;
    assert!(
        relay.log().contains("resuming admin job"),
        "the restarted relay did not resume the job:\n{}",
        relay.log()
    );
    let done = until("the job done after the restart", LONG, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(
        (done["done"].as_u64(), done["examined"].as_u64()),
        (Some(N as u64), Some(N as u64)),
        "{done}"
    );
    let t = api.tenant("other").await;
    assert_eq!(
        (
            t["counters"]["dead"].as_i64(),
            t["counters"]["pending"].as_i64()
        ),
        (Some(0), Some(N as i64)),
        "{t}"
    );

    sink.release();
    until(
        "every revived row delivered",
        Duration::from_secs(600),
        async || (sink.delivered().len() >= N).then_some(()),
    )
    .await;
    until("the tenant drained", LONG, async || {
        (api.tenant("other").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for r in sink.delivered() {
        *per_key.entry(r.id()).or_default() += 1;
    }
    assert_eq!(per_key.len(), N);
    assert_eq!(
        per_key
            .keys()
            .cloned()
            .collect::<std::collections::HashSet<_>>(),
        ids
    );
    let twice: Vec<_> = per_key.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(
        api.tenant("other").await["counters"]["delivered_total"].as_u64(),
        Some(N as u64)
    );

    relay.sigterm();
    assert!(relay.wait_exit(LONG).await.success());
    let kv = ankusa_engine_rocksdb::RocksKv::open(relay.data_dir().join("store-rocksdb"))
        .expect("open the store");
    let violations =
        ankusa_queue::check_invariants(&ankusa_engine::Kv::snapshot(&kv)).expect("check");
    assert!(violations.is_empty(), "{violations:#?}");
}

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
    // Outside /v1/ the Host is not checked (a scraper may name the machine).
    let (status, _) = send(
        "GET",
        "/metrics",
        &[("host", format!("relay-box:{port}"))],
        "",
    )
    .await;
    assert_eq!(status, 200);
}

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

/// Runs the binary with `args` (and `ANKUSA_ADMIN_TOKEN` when given): exit
/// code and stdout, stderr.
pub(crate) fn cli(args: &[&str], token: Option<&str>) -> (i32, String, String) {
    let mut c = std::process::Command::new(BIN);
    c.args(args)
        .env_remove("ANKUSA_ADMIN_TOKEN")
        .env_remove("ANKUSA_ADMIN")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy");
    if let Some(t) = token {
        c.env("ANKUSA_ADMIN_TOKEN", t);
    }
    let out = c.output().expect("run ankusa");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The CLI: `--json` parses, tables print, a drop without `--yes` is refused
/// and changes nothing, and the exit codes say what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_json_refuses_drops_without_yes_and_exits_with_its_codes() {
    const TOKEN: &str = "cli-token";
    let sink = Sink::start(|_| Reply::Status(400)).await;
    let yaml = two_sources(&sink, "memory", "").replace(
        "listeners: {ingest: '{INGEST}', admin: '{ADMIN}'}",
        &format!("listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}', admin_token: '{TOKEN}'}}"),
    );
    let relay = Relay::start(&yaml).await;
    let api = Admin::new(&relay, Some(TOKEN));
    let id = relay.post("/hooks/spare", &[], "{\"i\":1}").await.id();
    until("the hook dead", LONG, async || {
        (api.tenant("other").await["counters"]["dead"] == 1).then_some(())
    })
    .await;
    let admin = format!("http://{}", relay.admin);
    let a = admin.as_str();

    let (code, out, err) = cli(&["tenants", "--admin", a, "--json"], Some(TOKEN));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("tenants --json is JSON");
    let other = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|t| t["name"] == "other")
        .expect("tenant other")
        .clone();
    assert_eq!(other["counters"]["dead"], 1);

    let (code, out, _) = cli(
        &["dlq", "list", "--admin", a, "--json", "--tenant", "other"],
        Some(TOKEN),
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).expect("dlq list --json");
    assert_eq!(v["items"][0]["id"], "other.1.0");
    assert_eq!(v["items"][0]["idempotency_key"].as_str(), Some(id.as_str()));
    let (code, out, _) = cli(
        &["dlq", "list", "--admin", a, "--reason", "permanent"],
        Some(TOKEN),
    );
    assert_eq!(code, 0);
    assert!(out.contains("other.1.0") && out.contains("REASON"), "{out}");
    let (code, out, _) = cli(&["hooks", "show", &id, "--admin", a, "--json"], Some(TOKEN));
    assert_eq!(code, 0);
    let hook: Value = serde_json::from_str(&out).expect("hooks show --json");
    // The same hook by <tenant>.<seq> and by its row id.
    for by in ["other.1", "other.1.0"] {
        let (code, same, err) = cli(&["hooks", "show", by, "--admin", a, "--json"], Some(TOKEN));
        assert_eq!(code, 0, "{by}: {err}");
        assert_eq!(
            serde_json::from_str::<Value>(&same).expect("hooks show --json"),
            hook,
            "{by}"
        );
    }
    assert_eq!(
        cli(&["hooks", "show", "other.x", "--admin", a], Some(TOKEN)).0,
        2
    );
    assert_eq!(hook["seq"], 1);
    // Dead on its first attempt's 400: that attempt is counted and its error
    // kept (it showed attempts 0 and no error).
    let row = &hook["deliveries"][0];
    assert_eq!(
        (row["state"].as_str(), row["attempts"].as_u64()),
        (Some("dead"), Some(1)),
        "{row}"
    );
    assert!(
        row["last_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("permanent: HTTP 400")),
        "{row}"
    );
    let (code, out, _) = cli(&["sources", "--admin", a], Some(TOKEN));
    assert_eq!(code, 0);
    // The address from ANKUSA_ADMIN, as from --admin.
    let by_env = std::process::Command::new(BIN)
        .args(["sources"])
        .env("ANKUSA_ADMIN", a)
        .env("ANKUSA_ADMIN_TOKEN", TOKEN)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .output()
        .expect("run ankusa");
    assert_eq!(
        by_env.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&by_env.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&by_env.stdout), out);
    assert!(
        out.contains("orders") && out.contains("web#0") && out.contains("header:x-entity-id"),
        "{out}"
    );

    // Destructive without --yes: refused (2), nothing dropped.
    for args in [
        vec!["dlq", "drop", "other.1.0", "--admin", a],
        vec!["dlq", "drop", "--all", "--admin", a],
    ] {
        let (code, _, err) = cli(&args, Some(TOKEN));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("--yes"), "{err}");
    }
    assert_eq!(api.dead("").await.len(), 1);
    // No token, a wrong token: 4. Nothing listening: 3. Usage: 2.
    assert_eq!(cli(&["tenants", "--admin", a], None).0, 4);
    assert_eq!(
        cli(&["dlq", "revive", "other.1.0", "--admin", a], Some("nope")).0,
        4
    );
    assert_eq!(
        api.dead("").await.len(),
        1,
        "an unauthorized revive changed something"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    assert_eq!(
        cli(
            &["tenants", "--admin", &format!("http://{closed}")],
            Some(TOKEN)
        )
        .0,
        3
    );
    assert_eq!(cli(&["dlq", "revive", "--admin", a], Some(TOKEN)).0, 2);
    assert_eq!(cli(&["jobs", "cancel", "x"], Some(TOKEN)).0, 2);
    // An empty filter value, an address that is not http(s), a token HTTP
    // cannot carry: usage errors (2), nothing sent (break-it pass).
    assert_eq!(
        cli(
            &["dlq", "drop", "--tenant", "", "--yes", "--admin", a],
            Some(TOKEN)
        )
        .0,
        2
    );
    assert_eq!(
        cli(&["tenants", "--admin", "ftp://127.0.0.1:1"], Some(TOKEN)).0,
        2
    );
    assert_eq!(cli(&["tenants", "--admin", a], Some("cli-token\n")).0, 2);
    // What is not a row id never leaves the CLI (`../jobs/..` reaches no other
    // route; the API's own refusal is tested on the API).
    for bad in [
        "../jobs/1/cancel#",
        "other.1",
        "other.x.0",
        "other.01.0",
        "",
        "other.99999999999999999999.0",
        "other.1.65536",
    ] {
        let (code, _, err) = cli(&["dlq", "revive", bad, "--admin", a], Some(TOKEN));
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(err.contains("not a row id"), "{err}");
    }
    assert_eq!(api.dead("").await.len(), 1);
    // The API refuses: 1.
    let (code, _, err) = cli(&["dlq", "revive", "other.9.0", "--admin", a], Some(TOKEN));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("409") && err.contains("not in the dead-letter queue"),
        "{err}"
    );

    // Drop by filter as a job, waited for: 0, and the row is gone.
    let (code, out, err) = cli(
        &[
            "dlq", "drop", "--tenant", "other", "--yes", "--wait", "--json", "--admin", a,
        ],
        Some(TOKEN),
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job --json");
    assert_eq!(
        (
            job["kind"].as_str(),
            job["state"].as_str(),
            job["done"].as_u64()
        ),
        (Some("drop"), Some("done"), Some(1))
    );
    assert_eq!(api.dead("").await.len(), 0);
    let t = api.tenant("other").await;
    assert_eq!(
        (
            t["counters"]["dead"].as_i64(),
            t["counters"]["dead_bytes"].as_i64()
        ),
        (Some(0), Some(0))
    );
    // The same filter again matches nothing: done with 0, and it says so
    // (README "Filters"; a new user saw only the table row).
    let (code, out, err) = cli(
        &[
            "dlq", "drop", "--tenant", "other", "--yes", "--wait", "--admin", a,
        ],
        Some(TOKEN),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("drop") && out.contains("done"), "{out}");
    assert!(
        err.contains("matched nothing") && err.contains("--reason is a prefix"),
        "{err}"
    );
    let (code, _, _) = cli(&["hooks", "show", &id, "--admin", a], Some(TOKEN));
    assert_eq!(code, 1, "the dropped hook's envelope is gone");
    let (code, out, _) = cli(&["jobs", "--admin", a], Some(TOKEN));
    assert_eq!(code, 0);
    assert!(out.contains("drop") && out.contains("done"), "{out}");
    let (code, _, err) = cli(&["jobs", "cancel", "1", "--admin", a], Some(TOKEN));
    assert_eq!(code, 1, "cancel of a finished job: {err}");
    // A token that is not UTF-8 is a usage error, not an unset token (4).
    let odd = std::process::Command::new(BIN)
        .args(["tenants", "--admin", a])
        .env(
            "ANKUSA_ADMIN_TOKEN",
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"t\xffk"),
        )
        .output()
        .expect("run ankusa");
    assert_eq!(
        odd.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&odd.stderr)
    );
    assert!(
        String::from_utf8_lossy(&odd.stderr).contains("ANKUSA_ADMIN_TOKEN has"),
        "{}",
        String::from_utf8_lossy(&odd.stderr)
    );
}

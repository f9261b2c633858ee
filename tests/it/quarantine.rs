//! Quarantine (docs/design.md section 5, "Quarantine"): hooks held instead of
//! refused (a bad signature too), listed, released with their stored
//! ordering key and in order, or dropped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ankusa_engine::{Cf, Durability, Kv, Read};
use ankusa_keys::TenantOrd;
use serde_json::{Value, json};

use crate::admin::{Admin, cli};
use crate::keyed::{KEYS, body, by_key, label};
use crate::relay::{Relay, config};
use crate::sink::{Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);

const JSON: (&str, &str) = ("content-type", "application/json");

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

const GITHUB_SECRET: &str = "It's a Secret to Everybody";

fn github_signature(body: &[u8]) -> String {
    crate::relay::github_signature(GITHUB_SECRET, body)
}

/// `quarantine: true` holds every hook (202, never delivered);
/// `on_invalid_signature: quarantine` holds a forged hook instead of refusing
/// it, and the forgery takes no part in dedupe: the genuine hook with the same
/// delivery id is accepted (200, not a duplicate) and delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_hooks_are_held_and_a_bad_signature_is_held_not_refused() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "
sources:
  - name: review
    quarantine: true
    sinks: [{{type: http, url: '{url}'}}]
  - name: signed
    verification: {{type: github, secrets: [\"{GITHUB_SECRET}\"]}}
    on_invalid_signature: quarantine
    dedupe: {{header: x-github-delivery}}
    sinks: [{{type: http, url: '{url}'}}]
  - name: strict
    verification: {{type: github, secrets: [\"{GITHUB_SECRET}\"]}}
    sinks: [{{type: http, url: '{url}'}}]
",
            url = sink.url()
        ),
    ))
    .await;
    for i in 0..3 {
        let a = relay
            .post("/hooks/review", &[JSON], body("review", i))
            .await;
        assert_eq!(a.status, 202, "{a:?}");
        assert_eq!(a.body["quarantined"], true);
        assert_eq!(a.body["id"].as_str().map(str::len), Some(36), "{a:?}");
    }
    let genuine = body("signed", 1);
    let forged = body("forged", 1);
    let a = relay
        .post(
            "/hooks/signed",
            &[
                JSON,
                ("x-github-delivery", "d-1"),
                ("x-hub-signature-256", &github_signature(b"something else")),
            ],
            forged.clone(),
        )
        .await;
    assert_eq!(
        (a.status, a.body["quarantined"].as_bool()),
        (202, Some(true)),
        "{a:?}"
    );
    let a = relay
        .post(
            "/hooks/signed",
            &[
                JSON,
                ("x-github-delivery", "d-1"),
                ("x-hub-signature-256", &github_signature(genuine.as_bytes())),
            ],
            genuine.clone(),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(
        a.body.get("duplicate"),
        None,
        "the forged hook made the genuine one a duplicate: {a:?}"
    );
    let genuine_id = a.id();
    // Without the option a bad signature is still refused.
    let a = relay
        .post(
            "/hooks/strict",
            &[JSON, ("x-hub-signature-256", "sha256=00")],
            forged.clone(),
        )
        .await;
    assert_eq!(a.status, 401, "{a:?}");
    until("the genuine hook delivered", WAIT, async || {
        sink.delivered()
            .iter()
            .any(|r| r.id() == genuine_id)
            .then_some(())
    })
    .await;
    until("its outcome committed", WAIT, async || {
        (relay.metrics().await["ankusa_queue_pending"] == 0.0).then_some(())
    })
    .await;
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_quarantined"], 4.0, "{m:?}");
    assert_eq!(m["ankusa_ingest_quarantined_total"], 4.0);
    assert_eq!(m["ankusa_ingest_unauthorized_total"], 1.0);
    assert_eq!(m["ankusa_ingest_accepted_total"], 1.0);
    let reqs = sink.requests();
    assert_eq!(reqs.len(), 1, "a quarantined hook was delivered: {reqs:?}");
    assert_eq!(String::from_utf8_lossy(&reqs[0].body), genuine);
}

/// The release and drop entry points of the admin API
/// (`ankusa_admin::quarantine`), on the edge in process (memory store): a hook held for a bad signature is released with
/// its rows resolved from the stored envelope (its ordering key from a stored
/// header, ADR 0004 section 2) and keeps its seq; a second release is refused;
/// a drop deletes another held hook; the store stays consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_hook_is_released_with_its_stored_ordering_key_or_dropped() {
    use ankusa_admin::quarantine::{ReleaseError, drop_quarantined, release_quarantined};
    use ankusa_edge::server::{Edge, EdgeStats, build_routes};
    use ankusa_engine::memory::MemoryKv;
    use ankusa_keys::{SinkIx, lane_member_key};
    use ankusa_queue::writer::{Writer, WriterConfig};

    let yaml = format!(
        "
sources:
  - name: signed
    verification: {{type: github, secrets: [\"{GITHUB_SECRET}\"]}}
    on_invalid_signature: quarantine
    sinks:
      - {{type: http, url: 'http://127.0.0.1:9/in', ordered: true, ordering_key: {{header: x-entity-id}}}}
      - {{type: http, url: 'http://127.0.0.1:9/in2'}}
"
    );
    let cfg = ankusa_config::Config::from_yaml(&yaml, &|_| None).expect("config");
    let kv = Arc::new(MemoryKv::new());
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .expect("init");
    let (batch, registry) =
        ankusa_queue::register(&*kv, ["default"], ["signed"]).expect("register");
    kv.write(batch, Durability::Sync).expect("register");
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), now_ms).expect("writer");
    let writer_task = tokio::spawn(writer.run());
    let woken = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let w = Arc::clone(&woken);
    let edge = Arc::new(Edge {
        kv: Arc::clone(&kv),
        writer: handle,
        on_commit: Box::new(move || {
            w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }),
        routes: arc_swap::ArcSwap::from_pointee(ankusa_edge::server::IngestRoutes {
            sources: build_routes(&cfg, &registry).expect("routes"),
            body_limit_bytes: 1 << 20,
            node_max_pending: 1000,
            node_max_pending_bytes: 1 << 30,
        }),
        max_connections: ankusa_edge::server::MAX_CONNECTIONS,
        shutting_down: Arc::new(AtomicBool::new(false)),
        reservations: Default::default(),
        stats: Arc::new(EdgeStats::default()),
        clock: Box::new(now_ms),
        owners: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let serve = tokio::spawn(Arc::clone(&edge).serve(listener, stop_rx));
    let client = crate::relay::client();
    for (i, key) in ["cus_9", "cus_8"].into_iter().enumerate() {
        let a = crate::relay::post(
            &client,
            &format!("http://{addr}/hooks/signed"),
            &[
                JSON,
                ("x-entity-id", key),
                ("x-hub-signature-256", "sha256=00"),
            ],
            body(key, i).into_bytes(),
        )
        .await
        .expect("post");
        assert_eq!(a.status, 202, "{a:?}");
    }
    let page = ankusa_queue::list_quarantined(&*kv, TenantOrd(1), None, 10).expect("list");
    assert_eq!(page.hooks.len(), 2);
    assert!(
        page.hooks[0].reason.starts_with("invalid signature"),
        "{:?}",
        page.hooks[0]
    );
    let (first, second) = (page.hooks[0].seq, page.hooks[1].seq);
    let source = registry.sources["signed"];

    let r = release_quarantined(&edge, TenantOrd(1), first)
        .await
        .expect("release");
    assert_eq!((r.source.as_str(), r.rows), ("signed", 2));
    assert_eq!(
        woken.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the pipeline is woken"
    );
    // The ordered sink's row joined the lane of the stored header's key.
    let lane = ankusa_queue::lanes::lane_id(SinkIx(0), source, Some(b"cus_9"));
    assert!(
        kv.get(
            Cf::Index,
            &lane_member_key(TenantOrd(1), lane, first, SinkIx(0))
        )
        .expect("get")
        .is_some()
    );
    assert_eq!(ankusa_queue::check_invariants(&*kv).expect("check"), vec![]);
    assert_eq!(
        release_quarantined(&edge, TenantOrd(1), first)
            .await
            .unwrap_err(),
        ReleaseError::NotQuarantined {
            tenant: TenantOrd(1),
            seq: first
        }
    );
    drop_quarantined(&edge, TenantOrd(1), second)
        .await
        .expect("drop");
    assert!(
        kv.get(Cf::Hooks, &ankusa_keys::hook_key(TenantOrd(1), second))
            .expect("get")
            .is_none()
    );
    assert_eq!(
        drop_quarantined(&edge, TenantOrd(1), second)
            .await
            .unwrap_err(),
        ReleaseError::NotQuarantined {
            tenant: TenantOrd(1),
            seq: second
        }
    );
    assert!(
        ankusa_queue::list_quarantined(&*kv, TenantOrd(1), None, 10)
            .expect("list")
            .hooks
            .is_empty()
    );
    assert_eq!(ankusa_queue::check_invariants(&*kv).expect("check"), vec![]);
    let _ = stop_tx.send(true);
    serve.await.expect("edge");
    drop(edge);
    writer_task.await.expect("join").expect("writer");
}

/// Quarantine review (docs/design.md section 5, "Quarantine"): a
/// `quarantine: true` source whose store_headers keeps only the ordering
/// header: its hooks are listed page by page, shown, released one by one (API
/// and CLI) in order with their stored ordering key, dropped
/// (404 afterwards, counters right), and the rest released or dropped by a
/// job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_hooks_are_listed_released_in_order_and_dropped() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
tenants: [{{name: default}}]
sources:
  - name: review
    tenant: default
    quarantine: true
    store_headers: {{default: drop, headers: {{x-entity-id: keep}}}}
    sinks:
      - {{type: http, name: web, url: '{url}', ordered: true, ordering_key: {{header: x-entity-id}}}}
",
            url = sink.url()
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);
    let admin = format!("http://{}", relay.admin);
    let a = admin.as_str();
    let mut ids = Vec::new();
    for i in 0..12 {
        let key = KEYS[i % 2];
        let r = relay
            .post("/hooks/review", &[JSON, ("x-entity-id", key)], body(key, i))
            .await;
        assert_eq!(
            (r.status, r.body["quarantined"].as_bool()),
            (202, Some(true)),
            "{r:?}"
        );
        ids.push(r.body["id"].as_str().expect("id").to_owned());
    }
    assert_eq!(api.tenant("default").await["counters"]["quarantined"], 12);
    // Three pages of five.
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    for pages in 1.. {
        let q = cursor
            .take()
            .map_or_else(|| "limit=5".to_owned(), |c| format!("limit=5&cursor={c}"));
        let page = api
            .ok(
                "GET",
                "/v1/tenants/{tenant}/quarantine",
                &format!("/v1/tenants/default/quarantine?{q}"),
                None,
            )
            .await;
        listed.extend(page["items"].as_array().expect("items").clone());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => {
                assert_eq!(pages, 3);
                break;
            }
        }
    }
    assert_eq!(listed.len(), 12);
    for (i, h) in listed.iter().enumerate() {
        assert_eq!(
            (h["seq"].as_u64(), h["source"].as_str()),
            (Some(i as u64 + 1), Some("review")),
            "{h}"
        );
        assert_eq!(
            (h["id"].as_str(), h["reason"].as_str()),
            (
                Some(format!("default.{}", i + 1).as_str()),
                Some("source under quarantine")
            )
        );
        assert_eq!(h["idempotency_key"].as_str(), Some(ids[i].as_str()));
    }
    let shown = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/1",
            None,
        )
        .await;
    assert_eq!(shown["reason"], "source under quarantine");
    // The hook's own view says it is held (it has no rows to show).
    let hook = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/1",
            None,
        )
        .await;
    assert_eq!(
        (
            hook["quarantined"].as_str(),
            hook["deliveries"].as_array().map(Vec::len)
        ),
        (Some("source under quarantine"), Some(0)),
        "{hook}"
    );
    let (code, out, err) = cli(
        &[
            "hooks", "show", "--tenant", "default", "--seq", "1", "--admin", a,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("quarantined: source under quarantine"),
        "{out}"
    );
    // The source's store_headers keeps the ordering header and nothing else.
    let headers = shown["hook"]["headers"].as_array().expect("headers");
    assert_eq!(headers.len(), 1, "{shown}");
    assert_eq!(
        (headers[0]["name"].as_str(), headers[0]["value"].as_str()),
        (Some("x-entity-id"), Some("cus_a")),
        "{shown}"
    );
    // Nothing is delivered while held.
    assert_eq!(sink.requests().len(), 0);

    // Release 1..=6 through the API, 7 and 8 through the CLI.
    for seq in 1..=6 {
        let r = api
            .ok(
                "POST",
                "/v1/tenants/{tenant}/quarantine/{seq}/release",
                &format!("/v1/tenants/default/quarantine/{seq}/release"),
                None,
            )
            .await;
        assert_eq!(
            r,
            json!({ "id": format!("default.{seq}"), "released": true, "source": "review", "rows": 1 })
        );
    }
    assert_eq!(
        api.ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/1",
            None
        )
        .await["quarantined"],
        Value::Null
    );
    for seq in [7, 8] {
        let (code, out, err) = cli(
            &[
                "quarantine",
                "release",
                &format!("default.{seq}"),
                "--admin",
                a,
            ],
            None,
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&format!("released default.{seq}")), "{out}");
    }
    // Drop 9 and 10 through the API, 11 and 12 through the CLI (--yes).
    for seq in [9, 10] {
        let r = api
            .ok(
                "DELETE",
                "/v1/tenants/{tenant}/quarantine/{seq}",
                &format!("/v1/tenants/default/quarantine/{seq}"),
                None,
            )
            .await;
        assert_eq!(
            r,
            json!({ "id": format!("default.{seq}"), "dropped": true })
        );
    }
    let (code, _, err) = cli(&["quarantine", "drop", "default.11", "--admin", a], None);
    assert_eq!(code, 2, "a drop without --yes: {err}");
    assert!(err.contains("--yes"));
    for seq in [11, 12] {
        let (code, _, err) = cli(
            &[
                "quarantine",
                "drop",
                &format!("default.{seq}"),
                "--yes",
                "--admin",
                a,
            ],
            None,
        );
        assert_eq!(code, 0, "{err}");
    }
    let delivered = until("the released hooks delivered", WAIT, async || {
        (sink.delivered().len() == 8).then(|| sink.delivered())
    })
    .await;
    assert_eq!(
        by_key(&delivered),
        BTreeMap::from([
            ("cus_a".to_owned(), vec![0, 2, 4, 6]),
            ("cus_b".to_owned(), vec![1, 3, 5, 7])
        ])
    );
    for r in &delivered {
        let (key, i) = label(r);
        assert_eq!(
            r.key(),
            Some(key),
            "the stored ordering header makes the lane"
        );
        assert_eq!(
            r.id(),
            ids[i as usize],
            "a released hook keeps its idempotency key"
        );
    }
    // Dropped: gone. Released: no longer quarantined.
    for seq in 9..=12 {
        let (status, e) = api
            .call(
                "GET",
                "/v1/tenants/{tenant}/quarantine/{seq}",
                &format!("/v1/tenants/default/quarantine/{seq}"),
                None,
            )
            .await;
        assert_eq!(status, 404, "{e}");
        let (status, _) = api
            .call(
                "GET",
                "/v1/tenants/{tenant}/hooks/{seq}",
                &format!("/v1/tenants/default/hooks/{seq}"),
                None,
            )
            .await;
        assert_eq!(status, 404);
    }
    let (status, e) = api
        .call(
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/1/release",
            None,
        )
        .await;
    assert_eq!(status, 409, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .expect("message")
            .contains("not quarantined"),
        "{e}"
    );
    until("the released hooks settled", WAIT, async || {
        (api.tenant("default").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let c = api.tenant("default").await["counters"].clone();
    assert_eq!(
        (
            c["quarantined"].as_i64(),
            c["delivered_total"].as_i64(),
            c["dead"].as_i64()
        ),
        (Some(0), Some(8), Some(0)),
        "{c}"
    );
    assert_eq!(relay.metrics().await["ankusa_quarantined"], 0.0);

    // The rest by jobs: three released, two dropped.
    for i in 12..15 {
        relay
            .post(
                "/hooks/review",
                &[JSON, ("x-entity-id", "cus_a")],
                body("cus_a", i),
            )
            .await;
    }
    let (code, out, err) = cli(
        &[
            "quarantine",
            "release",
            "--source",
            "review",
            "--wait",
            "--json",
            "--admin",
            a,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job");
    assert_eq!(
        (
            job["kind"].as_str(),
            job["state"].as_str(),
            job["done"].as_u64()
        ),
        (Some("release_quarantined"), Some("done"), Some(3)),
        "{job}"
    );
    until("the job's hooks delivered", WAIT, async || {
        (sink.delivered().len() == 11).then_some(())
    })
    .await;
    for i in 15..17 {
        relay
            .post(
                "/hooks/review",
                &[JSON, ("x-entity-id", "cus_b")],
                body("cus_b", i),
            )
            .await;
    }
    let (code, out, err) = cli(
        &[
            "quarantine",
            "drop",
            "--all",
            "--yes",
            "--wait",
            "--json",
            "--admin",
            a,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job");
    assert_eq!(
        (
            job["kind"].as_str(),
            job["state"].as_str(),
            job["done"].as_u64()
        ),
        (Some("drop_quarantined"), Some("done"), Some(2)),
        "{job}"
    );
    let (code, out, _) = cli(&["quarantine", "list", "--admin", a], None);
    assert_eq!(code, 0);
    assert!(out.contains("(none)"), "{out}");
    let c = api.tenant("default").await["counters"].clone();
    assert_eq!(c["quarantined"].as_i64(), Some(0), "{c}");
}

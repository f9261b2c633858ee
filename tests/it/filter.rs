//! Filters per sink (docs/design.md section 10), through the real binary: a
//! sink entry's `filter` decides at ingest whether a hook gets a delivery row
//! for it at all. The Stripe corpus through an ordered sink that takes only
//! `invoice.*` beside one that takes everything; the GitHub corpus through an
//! `X-GitHub-Event` one_of filter (hooks no sink takes are still committed,
//! deduped and answered 200); quarantine release and archive replay apply the
//! same filters; bad filters are refused at load naming source, sink and
//! option.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::time::Duration;

use serde_json::{Value, json};

use crate::admin::Admin;
use crate::corpus::Hook;
use crate::relay::{Relay, config, run_cli};
use crate::sink::{Req, Sink, until};
use crate::stripe;

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);

fn event_type(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).expect("a Stripe body is JSON");
    v["type"].as_str().expect("type").to_owned()
}

/// The sink names of the delivery rows the hook with idempotency key `id`
/// has now (admin API, `GET /v1/hooks/{idempotency_key}`).
async fn rows_of(api: &Admin, id: &str) -> BTreeSet<String> {
    let hook = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{id}"),
            None,
        )
        .await;
    hook["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["sink"].as_str().expect("sink").to_owned())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// The ids each ordering key's requests carried, in arrival order (a repeat
/// right after itself, an at-least-once redelivery, counted once).
fn ids_by_key(reqs: &[Req]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in reqs {
        let ids = out
            .entry(
                r.key()
                    .unwrap_or_else(|| panic!("request {} has no ordering key", r.n)),
            )
            .or_default();
        if ids.last() != Some(&r.id()) {
            ids.push(r.id());
        }
    }
    out
}

/// The Stripe corpus, four rounds (40 hooks accepted, 12 of them
/// `invoice.*`), through source `stripe` with two sinks: `invoices`, ordered
/// per customer and filtered on `{json: type, prefix: "invoice."}`, and
/// `all`, unfiltered. Both are paused through the admin API while the hooks
/// arrive, so the store can be read: every hook has a row for `all`, the
/// invoice hooks one for `invoices` too, the others none for it (and the
/// metrics count 28 filtered rows). Resumed: `invoices` gets exactly the 12
/// invoice hooks, each customer's in send order; `all` gets all 40.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stripe_corpus_reaches_an_invoice_sink_only_with_invoice_events_in_order_per_customer()
{
    let sink = Sink::ok().await;
    let url = sink.url();
    let relay = Relay::start(&config(
        "memory",
        &stripe::source_yaml(&format!(
            "[{{type: http, name: invoices, url: '{url}voices', ordered: true, ordering_key: {{json: data.object.customer}}, filter: {{json: type, prefix: 'invoice.'}}}}, \
              {{type: http, name: all, url: '{url}'}}]"
        )),
    ))
    .await;
    let api = Admin::new(&relay, None);
    for name in ["invoices", "all"] {
        let p = api
            .ok(
                "POST",
                "/v1/sources/{source}/sinks/{sink}/pause",
                &format!("/v1/sources/stripe/sinks/{name}/pause"),
                Some(json!({})),
            )
            .await;
        assert_eq!(p["paused"], true, "{p}");
    }

    // The banner says which sink filters.
    let log = relay.log();
    assert!(
        log.lines()
            .any(|l| l.contains("http invoices") && l.contains("[filter]")),
        "{log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("http all") && l.contains("[filter]")),
        "{log}"
    );
    let sent = stripe::send(&relay, &stripe::hooks(4)).await;
    assert_eq!(sent.len(), 40);
    let invoices: Vec<&stripe::Sent> = sent
        .iter()
        .filter(|s| event_type(&s.body).starts_with("invoice."))
        .collect();
    assert_eq!(
        invoices.len(),
        12,
        "invoice.created, .finalized and .paid in each round"
    );
    // The store, while nothing is delivered: the rows each hook has.
    for s in &sent {
        let want = if event_type(&s.body).starts_with("invoice.") {
            set(&["all", "invoices"])
        } else {
            set(&["all"])
        };
        assert_eq!(
            rows_of(&api, &s.id).await,
            want,
            "{} ({})",
            s.file,
            event_type(&s.body)
        );
    }
    let m = relay.metrics().await;
    assert_eq!(
        m["ankusa_queue_pending"], 52.0,
        "40 rows of all and 12 of invoices: {m:?}"
    );
    assert_eq!(
        m["ankusa_ingest_filtered_total{source=\"stripe\",sink_name=\"invoices\"}"], 28.0,
        "{m:?}"
    );
    assert_eq!(
        m["ankusa_ingest_filtered_total"], 28.0,
        "no row of all was filtered: {m:?}"
    );
    assert_eq!(
        m["ankusa_ingest_unmatched_total"], 0.0,
        "every hook has a row for all"
    );
    assert_eq!(m["ankusa_ingest_accepted_total"], 40.0);
    assert_eq!(
        m["ankusa_ingest_duplicates_total"], 4.0,
        "the provider retry of each round"
    );
    // The invoice events all carry a customer: no keyless invoice row.
    assert_eq!(
        m.get("ankusa_dispatch_lane_key_missing_total")
            .copied()
            .unwrap_or(0.0),
        0.0,
        "{m:?}"
    );
    assert!(sink.requests().is_empty(), "a paused sink was called");

    for name in ["invoices", "all"] {
        api.ok(
            "POST",
            "/v1/sources/{source}/sinks/{sink}/resume",
            &format!("/v1/sources/stripe/sinks/{name}/resume"),
            None,
        )
        .await;
    }
    crate::peer::drained(&relay, WAIT).await;
    let got = sink.delivered();
    let to_invoices: Vec<Req> = got
        .iter()
        .filter(|r| r.path == "/invoices")
        .cloned()
        .collect();
    let to_all: Vec<Req> = got.iter().filter(|r| r.path == "/in").cloned().collect();
    assert_eq!(
        to_all.iter().map(Req::id).collect::<BTreeSet<_>>(),
        sent.iter().map(|s| s.id.clone()).collect::<BTreeSet<_>>()
    );
    for r in &to_invoices {
        assert!(
            event_type(&r.body).starts_with("invoice."),
            "request {}: {} reached the invoice sink",
            r.n,
            event_type(&r.body)
        );
    }
    let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in &invoices {
        want.entry(s.key.clone()).or_default().push(s.id.clone());
    }
    assert_eq!(want.len(), 3, "three customers: {want:?}");
    assert_eq!(
        ids_by_key(&to_invoices),
        want,
        "the invoice hooks, each customer's in send order"
    );
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 52.0, "{m:?}");
}

/// The GitHub corpus (27 files, each a distinct `X-GitHub-Delivery`) through
/// source `github` (dedupe on that header) with two filtered sinks: `deploys`
/// takes `{header: x-github-event, one_of: [push, pull_request]}` (14 files,
/// lower-case header names and bodies over 1 MiB included: a header filter
/// never reads the body), `prs` takes pull requests whose JSON `action` is
/// opened or synchronize (4). The 13 other events have no row at all: still
/// answered 200 with an id, stored (the admin API shows them with no
/// deliveries), counted unmatched, and a provider retry of one is a dedupe
/// hit answering the first id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_events_reach_only_the_sinks_whose_filters_take_them() {
    let sink = Sink::ok().await;
    let url = sink.url();
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
sources:
  - name: github
    verification: {{type: github, secrets: [\"It's a Secret to Everybody\"]}}
    dedupe: {{header: x-github-delivery}}
    sinks:
      - type: http
        name: deploys
        url: '{url}'
        filter: {{header: X-GitHub-Event, one_of: [push, pull_request]}}
      - type: http
        name: prs
        url: '{url}prs'
        filter:
          - {{header: x-github-event, equals: pull_request}}
          - {{json: action, one_of: [opened, synchronize]}}
"
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);
    let mut files: Vec<String> = std::fs::read_dir(crate::corpus::corpus_dir().join("github"))
        .expect("github corpus")
        .map(|e| format!("github/{}", e.expect("entry").file_name().to_string_lossy()))
        .collect();
    files.sort();
    assert_eq!(files.len(), 27);
    let mut ids: BTreeMap<String, (String, String)> = BTreeMap::new(); // file -> (id, event)
    for f in &files {
        let h = Hook::load(f);
        let a = relay
            .post("/hooks/github", &h.send_headers(), h.body.clone())
            .await;
        assert_eq!(a.status, 200, "{f}: {a:?}");
        assert_eq!(a.body["duplicate"], Value::Null, "{f}: {a:?}");
        ids.insert(
            f.clone(),
            (
                a.id(),
                h.header("x-github-event").expect("event").to_owned(),
            ),
        );
    }
    let deploys: BTreeSet<&str> = ids
        .iter()
        .filter(|(_, (_, e))| e == "push" || e == "pull_request")
        .map(|(_, (id, _))| id.as_str())
        .collect();
    let prs: BTreeSet<&str> = [
        "github/pull_request_opened.json",
        "github/pull_request_opened_null_body.json",
        "github/pull_request_synchronize.json",
        "github/pull_request_synchronize_lowercase_headers.json",
    ]
    .iter()
    .map(|f| ids[*f].0.as_str())
    .collect();
    assert_eq!((deploys.len(), prs.len()), (14, 4));
    let got = until("14 deliveries to deploys and 4 to prs", WAIT, async || {
        let d = sink.delivered();
        let n = |p: &str| d.iter().filter(|r| r.path == p).count();
        (n("/in") >= 14 && n("/inprs") >= 4).then_some(d)
    })
    .await;
    let at = |p: &str| {
        got.iter()
            .filter(|r| r.path == p)
            .map(Req::id)
            .collect::<BTreeSet<String>>()
    };
    assert_eq!(at("/in"), deploys.iter().map(|s| (*s).to_owned()).collect());
    assert_eq!(at("/inprs"), prs.iter().map(|s| (*s).to_owned()).collect());
    for r in got.iter().filter(|r| r.path == "/in") {
        let e = r
            .header("x-github-event")
            .expect("the provider's headers travel");
        assert!(e == "push" || e == "pull_request", "{e}");
    }

    let m = crate::peer::drained(&relay, WAIT).await;
    assert_eq!(m["ankusa_ingest_accepted_total"], 27.0, "{m:?}");
    assert_eq!(m["ankusa_ingest_unmatched_total"], 13.0, "{m:?}");
    assert_eq!(
        m["ankusa_ingest_filtered_total{source=\"github\",sink_name=\"deploys\"}"], 13.0,
        "{m:?}"
    );
    assert_eq!(
        m["ankusa_ingest_filtered_total{source=\"github\",sink_name=\"prs\"}"], 23.0,
        "{m:?}"
    );
    assert_eq!(m["ankusa_dispatch_delivered_total"], 18.0, "{m:?}");

    // A hook no sink took is stored all the same, with no delivery row.
    let (ping, _) = &ids["github/ping.json"];
    let hook = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{ping}"),
            None,
        )
        .await;
    assert_eq!(
        (
            hook["source"].as_str(),
            hook["deliveries"].as_array().map(Vec::len)
        ),
        (Some("github"), Some(0)),
        "{hook}"
    );
    let (code, out, err) = crate::admin::cli(
        &[
            "hooks",
            "show",
            ping,
            "--admin",
            &format!("http://{}", relay.admin),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "no delivery rows: delivered to every sink it had, or no sink's filter took it"
        ),
        "{out}"
    );
    // ... and its dedupe record answers a provider retry.
    let h = Hook::load("github/ping.json");
    let a = relay
        .post("/hooks/github", &h.send_headers(), h.body.clone())
        .await;
    assert_eq!(
        (a.status, a.body["duplicate"].as_bool(), a.id()),
        (200, Some(true), ping.clone()),
        "{a:?}"
    );
    let m = relay.metrics().await;
    assert_eq!(
        (
            m["ankusa_ingest_accepted_total"],
            m["ankusa_ingest_unmatched_total"]
        ),
        (27.0, 13.0)
    );
    assert_eq!(
        sink.requests().len(),
        18,
        "nothing delivered twice, nothing else"
    );
}

/// A `quarantine: true` Stripe source with the `invoices` filter and an
/// unfiltered sink: the held hooks have no row; a release makes rows only
/// where the filters take the stored hook (one release through the API says
/// `rows: 1`, the rest by a job); then an archive replay for sink `invoices`
/// copies only the invoice hooks (the others are skipped) and delivers them
/// again with their idempotency keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_release_and_archive_replay_apply_the_filters() {
    let sink = Sink::ok().await;
    let url = sink.url();
    let source = stripe::source_yaml(&format!(
        "[{{type: http, name: invoices, url: '{url}voices', ordered: true, ordering_key: {{json: data.object.customer}}, filter: {{json: type, prefix: 'invoice.'}}}}, \
          {{type: http, name: all, url: '{url}'}}]"
    ));
    // The same source, held in quarantine.
    let source = source.replace(", dedupe:", ", quarantine: true, dedupe:");
    assert!(source.contains("quarantine: true"), "{source}");
    let relay = Relay::start(&config("memory", &source)).await;
    let api = Admin::new(&relay, None);
    let hooks = stripe::hooks(1);
    let mut held = Vec::new(); // (seq order) id, is an invoice event
    for h in &hooks {
        let a = relay
            .post("/hooks/stripe", &h.send_headers(), h.body.clone())
            .await;
        assert_eq!(
            (a.status, a.body["quarantined"].as_bool()),
            (202, Some(true)),
            "{}: {a:?}",
            h.file
        );
        held.push((
            a.body["id"].as_str().expect("id").to_owned(),
            event_type(&h.body).starts_with("invoice."),
        ));
    }
    // Quarantined hooks take no part in dedupe: the provider retry is held too.
    assert_eq!(held.len(), 11);
    let n_invoices = held.iter().filter(|(_, inv)| *inv).count();
    assert_eq!(n_invoices, 4);
    assert_eq!(stripe::FILES[0], "stripe/customer_created.json");
    assert!(!held[0].1);

    // Hook 1 (customer.created): only the unfiltered sink takes it.
    let r = api
        .ok(
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/1/release",
            None,
        )
        .await;
    assert_eq!(
        r,
        json!({ "id": "default.1", "released": true, "source": "stripe", "rows": 1 })
    );
    assert!(!rows_of(&api, &held[0].0).await.contains("invoices"));
    let job = api
        .ok(
            "POST",
            "/v1/jobs",
            "/v1/jobs",
            Some(json!({ "kind": "release_quarantined", "filter": { "source": "stripe" } })),
        )
        .await;
    let id = job["id"].as_u64().expect("job id");
    let done = until("the release job done", WAIT, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await;
    assert_eq!(
        (done["state"].as_str(), done["done"].as_u64()),
        (Some("done"), Some(10)),
        "{done}"
    );
    let m = crate::peer::drained(&relay, WAIT).await;
    assert_eq!(
        m["ankusa_dispatch_delivered_total"], 15.0,
        "11 to all, 4 to invoices: {m:?}"
    );
    assert_eq!(
        m["ankusa_ingest_filtered_total{source=\"stripe\",sink_name=\"invoices\"}"], 7.0,
        "{m:?}"
    );
    let got = sink.delivered();
    let invoice_ids: BTreeSet<String> = held
        .iter()
        .filter(|(_, inv)| *inv)
        .map(|(id, _)| id.clone())
        .collect();
    let at = |reqs: &[Req], p: &str| {
        reqs.iter()
            .filter(|r| r.path == p)
            .map(Req::id)
            .collect::<Vec<String>>()
    };
    assert_eq!(
        at(&got, "/invoices").into_iter().collect::<BTreeSet<_>>(),
        invoice_ids
    );
    assert_eq!(at(&got, "/invoices").len(), 4, "each invoice hook once");
    assert_eq!(at(&got, "/in").len(), 11);

    // A replay to the invoice sink: only what its filter takes.
    let first = sink.requests().len();
    let job = api
        .ok("POST", "/v1/jobs", "/v1/jobs", Some(json!({ "kind": "replay", "filter": { "source": "stripe", "since": 0 }, "sinks": ["invoices"] })))
        .await;
    let id = job["id"].as_u64().expect("job id");
    let done = until("the replay done", WAIT, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await;
    assert_eq!(
        (
            done["state"].as_str(),
            done["done"].as_u64(),
            done["examined"].as_u64(),
            done["skipped"].as_u64()
        ),
        (Some("done"), Some(4), Some(11), Some(7)),
        "{done}"
    );
    crate::peer::drained(&relay, WAIT).await;
    let again: Vec<Req> = sink.requests()[first..].to_vec();
    assert!(
        again.iter().all(|r| r.path == "/invoices"),
        "a replay for invoices reached another sink"
    );
    assert_eq!(
        again.iter().map(Req::id).collect::<BTreeSet<_>>(),
        invoice_ids,
        "the copies carry the originals' keys"
    );
    assert_eq!(again.len(), 4);
}

/// A bad filter is refused at load by `check-config` and by `serve`, naming
/// the source, the sink and the option, every problem in one run.
#[test]
fn bad_filters_are_refused_at_load_naming_source_sink_and_option() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let data = dir.join("data");
    let yaml = format!(
        "node: {{data_dir: '{}', store: rocksdb}}
listeners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}
store_headers: {{headers: {{x-github-event: drop}}}}
sources:
  - name: github
    sinks:
      - {{type: http, name: deploys, url: 'http://127.0.0.1:9/x', filter: {{header: x-github-event, one_of: [push]}}}}
      - {{type: http, name: two, url: 'http://127.0.0.1:9/x', filter: {{json: type, equals: a, prefix: b}}}}
      - {{type: http, name: none, url: 'http://127.0.0.1:9/x', filter: {{json: type, contains: b}}}}
      - {{type: file, name: empty, path: '{}/f.ndjson', filter: [{{json: type, prefix: a}}, {{header: x-a, one_of: []}}]}}
      - {{type: http, name: path, url: 'http://127.0.0.1:9/x', filter: {{json: 'data..type', exists: true}}}}
      - {{type: http, name: header, url: 'http://127.0.0.1:9/x', filter: {{header: 'x event', exists: true}}}}
",
        data.display(),
        dir.display()
    );
    let file = dir.join("bad.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let expected = [
        "source \"github\", sink \"deploys\" (http): option \"filter\": header \"x-github-event\" is not kept by the store: the instance store_headers policy drops it",
        "source \"github\", sink \"two\" (http): option \"filter\": has 2 tests (equals, prefix): give one per condition",
        "source \"github\", sink \"none\" (http): option \"filter\": unknown key \"contains\" of a filter condition",
        "source \"github\", sink \"none\" (http): option \"filter\": has no test: add one of equals, one_of, prefix, exists",
        "source \"github\", sink \"empty\" (file): option \"filter[1]\": one_of is empty, so nothing would match",
        "source \"github\", sink \"path\" (http): option \"filter\": json: \"data..type\" is not a JSON dot path",
        "source \"github\", sink \"header\" (http): option \"filter\": header: \"x event\" is not a valid HTTP header name",
    ];
    for args in [
        vec![OsStr::new("check-config"), file.as_os_str()],
        vec![
            OsStr::new("serve"),
            OsStr::new("--config"),
            file.as_os_str(),
        ],
    ] {
        let (status, out) = run_cli(&args, dir);
        assert!(!status.success(), "{args:?} accepted:\n{out}");
        for e in expected {
            assert!(
                out.contains(e),
                "{args:?}: the output lacks\n  {e}\ngot:\n{out}"
            );
        }
    }
    assert!(
        !data.exists(),
        "serve created the data_dir of an invalid config"
    );
}

/// A hook no sink's filter takes makes no row, adds nothing to the queue and
/// is accepted even while its tenant is over its queue bounds (only the rows
/// made count); a hook that makes rows is still refused (429). A quarantine
/// release that makes no row (through the API or a job) counts
/// `ankusa_ingest_unmatched_total` like such a hook at ingest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_with_no_row_passes_the_bounds_and_a_release_with_no_row_is_unmatched() {
    let sink = crate::sink::Sink::start(|_| crate::sink::Reply::Hold).await;
    let url = sink.url();
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
tenants: [{{name: default, max_pending: 2}}]
sources:
  - name: gh
    tenant: default
    sinks:
      - {{type: http, name: pushes, url: '{url}', timeout_ms: 120000, filter: {{header: x-event, equals: push}}}}
  - name: review
    tenant: default
    quarantine: true
    sinks:
      - {{type: http, name: a, url: '{url}', timeout_ms: 120000, filter: {{header: x-event, equals: push}}}}
      - {{type: http, name: b, url: '{url}', timeout_ms: 120000, filter: {{header: x-event, equals: push}}}}
"
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);
    let json_ct = ("content-type", "application/json");
    let push = [json_ct, ("x-event", "push")];
    let ping = [json_ct, ("x-event", "ping")];
    // Two held pushes released: four rows, over the tenant's bound of two
    // (a release does not check the bounds).
    for i in 0..2 {
        let a = relay
            .post("/hooks/review", &push, format!("{{\"i\":{i}}}"))
            .await;
        assert_eq!(a.status, 202, "{a:?}");
    }
    for seq in [1, 2] {
        let r = api
            .ok(
                "POST",
                "/v1/tenants/{tenant}/quarantine/{seq}/release",
                &format!("/v1/tenants/default/quarantine/{seq}/release"),
                None,
            )
            .await;
        assert_eq!(r["rows"], 2, "{r}");
    }
    assert_eq!(api.tenant("default").await["counters"]["pending"], 4);
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_ingest_unmatched_total"], 0.0, "{m:?}");

    // A held ping released through the API, another by a job: no row.
    let a = relay.post("/hooks/review", &ping, "{\"i\":2}").await;
    assert_eq!(a.status, 202, "{a:?}");
    let r = api
        .ok(
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/3/release",
            None,
        )
        .await;
    assert_eq!(r["rows"], 0, "{r}");
    assert_eq!(relay.metrics().await["ankusa_ingest_unmatched_total"], 1.0);
    let a = relay.post("/hooks/review", &ping, "{\"i\":3}").await;
    assert_eq!(a.status, 202, "{a:?}");
    let job = api
        .ok(
            "POST",
            "/v1/jobs",
            "/v1/jobs",
            Some(json!({ "kind": "release_quarantined", "filter": { "source": "review" } })),
        )
        .await;
    let id = job["id"].as_u64().expect("job id");
    let done = until("the release job done", WAIT, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await;
    assert_eq!(
        (done["state"].as_str(), done["done"].as_u64()),
        (Some("done"), Some(1)),
        "{done}"
    );
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_ingest_unmatched_total"], 2.0, "{m:?}");
    assert_eq!(
        m["ankusa_ingest_filtered_total{source=\"review\",sink_name=\"a\"}"], 2.0,
        "{m:?}"
    );

    // Over its bounds: a push is refused, a ping (no row) is accepted.
    let refused = relay.post("/hooks/gh", &push, "{\"i\":4}").await;
    assert_eq!(
        (refused.status, refused.retry_after.as_deref()),
        (429, Some("30")),
        "{refused:?}"
    );
    let taken = relay.post("/hooks/gh", &ping, "{\"i\":5}").await;
    assert_eq!(
        taken.status, 200,
        "a hook with no row refused by the bounds: {taken:?}"
    );
    let hook = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{}", taken.id()),
            None,
        )
        .await;
    assert_eq!(
        hook["deliveries"].as_array().map(Vec::len),
        Some(0),
        "{hook}"
    );
    let m = relay.metrics().await;
    assert_eq!(
        (
            m["ankusa_ingest_unmatched_total"],
            m["ankusa_ingest_accepted_total"],
            m["ankusa_ingest_throttled_total"]
        ),
        (3.0, 1.0, 1.0),
        "{m:?}"
    );
    assert_eq!(
        api.tenant("default").await["counters"]["pending"],
        4,
        "the ping added nothing"
    );
}

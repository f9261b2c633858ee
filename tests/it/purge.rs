//! Purging a tenant (docs/design.md section 5, "Purge a tenant"): nothing of
//! the tenant left in any column family, the aggregate equal to the other
//! tenants' counters, and a provider's resend refused until the dedupe
//! records are gone, also after a restart.

use std::collections::BTreeMap;
use std::time::Duration;

use ankusa_engine::{Cf, Direction, Read};
use ankusa_keys::{CounterField, TenantOrd, counter_key, tenant_ranges};
use serde_json::{Value, json};

use crate::admin::{Admin, cli, validate};
use crate::keyed::{KEYS, assert_clean, body, open_store, stop};
use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);

const JSON: (&str, &str) = ("content-type", "application/json");

fn purge_config(url: &str) -> String {
    config(
        "rocksdb",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 100000, open_ms: 10}}
tenants: [{{name: doomed}}, {{name: keeper}}]
sources:
  - name: d_orders
    tenant: doomed
    sinks:
      - {{type: http, name: web, url: '{url}', timeout_ms: 120000, ordered: true, ordering_key: {{header: x-entity-id}}}}
  - name: d_review
    tenant: doomed
    quarantine: true
    sinks: [{{type: http, name: web, url: '{url}'}}]
  - name: k_orders
    tenant: keeper
    sinks: [{{type: http, name: web, url: '{url}k', timeout_ms: 120000}}]
"
        ),
    )
}

/// The node aggregate as `/metrics` shows it, by counter name.
async fn node_counters(relay: &Relay) -> BTreeMap<&'static str, f64> {
    let m = relay.metrics().await;
    [
        ("pending", "ankusa_queue_pending"),
        ("pending_bytes", "ankusa_queue_pending_bytes"),
        ("in_flight", "ankusa_dispatch_in_flight"),
        ("dead", "ankusa_dlq_dead"),
        ("dead_bytes", "ankusa_dlq_dead_bytes"),
        ("quarantined", "ankusa_quarantined"),
        ("delivered_total", "ankusa_dispatch_delivered_total"),
        ("dead_lettered_total", "ankusa_dispatch_dead_lettered_total"),
        ("lanes", "ankusa_dispatch_lanes"),
        ("lane_members", "ankusa_dispatch_lane_members"),
    ]
    .into_iter()
    .map(|(k, name)| {
        (
            k,
            *m.get(name).unwrap_or_else(|| panic!("no {name} in {m:?}")),
        )
    })
    .collect()
}

/// A tenant purge (docs/design.md section 5, "Purge a tenant"; ADR 0004
/// section 4.9): a tenant with lane heads in flight, lane members, dead
/// letters and quarantined hooks is purged by a job (the CLI refuses without
/// --yes); afterwards its counters are zero, the node aggregate equals the
/// other tenant's counters (also after the purged tenant's calls in flight
/// return), and, the relay stopped, no key of the tenant is left in any
/// column family of the store, whose invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_purge_leaves_nothing_of_the_tenant_and_the_aggregate_equal_to_the_others() {
    let sink = Sink::start(|r| match (r.path.as_str(), r.json()["key"].as_str()) {
        (_, Some("fail")) => Reply::Status(400),
        ("/ink", Some("hold")) | ("/in", _) => Reply::Hold,
        _ => Reply::Status(200),
    })
    .await;
    let mut relay = Relay::start(&purge_config(&sink.url())).await;
    let api = Admin::new(&relay, None);
    let admin = format!("http://{}", relay.admin);
    for (i, k) in ["f1", "f2", "f3"].into_iter().enumerate() {
        relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-entity-id", k)],
                body("fail", i),
            )
            .await
            .id();
    }
    until("three dead", WAIT, async || {
        (api.tenant("doomed").await["counters"]["dead"] == 3).then_some(())
    })
    .await;
    for i in 0..20 {
        let key = KEYS[i % 3];
        relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-entity-id", key)],
                body(key, i),
            )
            .await
            .id();
    }
    for i in 0..4 {
        let r = relay.post("/hooks/d_review", &[JSON], body("q", i)).await;
        assert_eq!(r.status, 202);
    }
    for (i, k) in ["ok", "ok", "ok", "ok", "ok", "fail", "hold"]
        .into_iter()
        .enumerate()
    {
        relay
            .post("/hooks/k_orders", &[JSON], body(k, i))
            .await
            .id();
    }
    let before = until("both tenants settled", WAIT, async || {
        let d = api.tenant("doomed").await["counters"].clone();
        let k = api.tenant("keeper").await["counters"].clone();
        (d["in_flight"] == 3
            && d["lane_members"] == 17
            && k["delivered_total"] == 5
            && k["dead"] == 1
            && k["in_flight"] == 1)
            .then_some(d)
    })
    .await;
    assert_eq!(
        (
            before["pending"].as_i64(),
            before["quarantined"].as_i64(),
            before["lanes"].as_i64()
        ),
        (Some(20), Some(4), Some(3)),
        "{before}"
    );
    let ord = api.tenant("doomed").await["ordinal"]
        .as_u64()
        .expect("ordinal") as u32;

    let (code, _, err) = cli(&["purge-tenant", "doomed", "--admin", &admin], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(
        api.tenant("doomed").await["counters"],
        before,
        "a refused purge changed something"
    );
    let (code, out, err) = cli(
        &[
            "purge-tenant",
            "doomed",
            "--yes",
            "--wait",
            "--json",
            "--admin",
            &admin,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job");
    validate("GET", "/v1/jobs/{id}", 200, &job);
    assert_eq!(
        (job["kind"].as_str(), job["state"].as_str()),
        (Some("purge_tenant"), Some("done")),
        "{job}"
    );
    assert_eq!(
        (job["done"].as_u64(), job["total"].as_u64()),
        (Some(27), Some(27)),
        "20 pending + 3 dead + 4 quarantined: {job}"
    );
    let zero: BTreeMap<String, Value> = [
        "pending",
        "pending_bytes",
        "in_flight",
        "dead",
        "dead_bytes",
        "quarantined",
        "delivered_total",
        "dead_lettered_total",
        "retries_total",
        "lanes",
        "lanes_blocked",
        "lane_members",
        "lanes_held",
    ]
    .into_iter()
    .map(|f| (f.to_owned(), json!(0)))
    .collect();
    let after: BTreeMap<String, Value> =
        serde_json::from_value(api.tenant("doomed").await["counters"].clone()).expect("counters");
    assert_eq!(after, zero);
    let (status, _) = api
        .call(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/doomed/hooks/4",
            None,
        )
        .await;
    assert_eq!(status, 404);
    let q = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/doomed/quarantine",
            None,
        )
        .await;
    assert_eq!(q["items"], json!([]));
    let keeper = api.tenant("keeper").await["counters"].clone();
    let node = node_counters(&relay).await;
    for (field, v) in &node {
        assert_eq!(
            keeper[*field].as_f64(),
            Some(*v),
            "node {field} is not keeper's: {node:?} {keeper}"
        );
    }
    // The purged tenant's calls still out come back: their outcomes find no
    // row and change nothing.
    sink.release();
    until("keeper drained", WAIT, async || {
        (api.tenant("keeper").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let after: BTreeMap<String, Value> =
        serde_json::from_value(api.tenant("doomed").await["counters"].clone()).expect("counters");
    assert_eq!(after, zero, "an outcome of a purged row moved a counter");
    stop(&mut relay).await;

    let kv = open_store(&relay);
    for (cf, range) in tenant_ranges(TenantOrd(ord)) {
        let left = kv.scan(cf, &range, Direction::Forward, 10).expect("scan");
        assert!(
            left.is_empty(),
            "{cf:?} still holds keys of the purged tenant: {left:?}"
        );
    }
    let keeper_ord = TenantOrd(ord + 1);
    for field in CounterField::ALL {
        let (n, k) = (
            kv.counter(&counter_key(TenantOrd::NODE, field))
                .expect("node"),
            kv.counter(&counter_key(keeper_ord, field)).expect("keeper"),
        );
        assert_eq!(n, k, "node {field:?}");
    }
    assert!(
        ankusa_queue::read_purges(&kv).expect("purges").is_empty(),
        "the purge mark is still there"
    );
    assert_clean(&kv);
}

fn purge_dedupe_config(url: &str) -> String {
    config(
        "rocksdb",
        &format!(
            "
tenants: [{{name: doomed}}, {{name: keeper}}]
sources:
  - name: d_orders
    tenant: doomed
    dedupe: {{header: x-delivery}}
    sinks: [{{type: http, name: web, url: '{url}'}}]
  - name: d_review
    tenant: doomed
    quarantine: true
    sinks: [{{type: http, name: web, url: '{url}'}}]
  - name: k_orders
    tenant: keeper
    dedupe: {{header: x-delivery}}
    sinks: [{{type: http, name: web, url: '{url}k'}}]
"
        ),
    )
}

/// The answer to every hook of a tenant being purged: 503, Retry-After 30.
fn assert_purge_refusal(what: &str, a: &crate::relay::Answer) {
    assert_eq!(
        (a.status, a.retry_after.as_deref()),
        (503, Some("30")),
        "{what}: {a:?}"
    );
    let msg = a.body["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("tenant doomed is being purged"),
        "{what}: {a:?}"
    );
}

pub(crate) async fn start_purge(api: &Admin) -> u64 {
    let job = api
        .ok(
            "POST",
            "/v1/jobs",
            "/v1/jobs",
            Some(json!({ "kind": "purge_tenant", "filter": { "tenant": "doomed" } })),
        )
        .await;
    job["id"].as_u64().expect("job id")
}

pub(crate) async fn job_ended(api: &Admin, id: u64) -> Value {
    until("the job ended", WAIT, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await
}

/// Posts hook `delivery` of d_orders; its id (a new hook, not a duplicate).
async fn post_new(relay: &Relay, delivery: &str) -> String {
    let a = relay
        .post(
            "/hooks/d_orders",
            &[JSON, ("x-delivery", delivery)],
            body(delivery, 0),
        )
        .await;
    assert_eq!(a.body["duplicate"], Value::Null, "{a:?}");
    a.id()
}

/// A tenant purge refuses every hook of the tenant before the dedupe check
/// (docs/design.md section 5, "Edge" and "Purge a tenant"): while the job
/// runs, a provider's resend of a hook whose dedupe record is still stored
/// gets 503 + Retry-After 30 like a new hook and a quarantined one (not 200
/// "duplicate": the purge deletes the hook it duplicates, and the provider
/// would never send it again); another tenant's hooks are accepted; after
/// the purge the resend is taken as a new hook. The same after a SIGKILL
/// mid-purge and a restart (the mark is read from the store). An answer
/// counts only when the job was still running after it arrived (the purge
/// may end first: then the round is tried again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_refuses_a_providers_resend_before_dedupe_also_after_a_restart() {
    let sink = Sink::ok().await;
    let mut relay = Relay::start(&purge_dedupe_config(&sink.url())).await;
    let api = Admin::new(&relay, None);
    let first = post_new(&relay, "evt_1").await;
    let dup = relay
        .post(
            "/hooks/d_orders",
            &[JSON, ("x-delivery", "evt_1")],
            body("evt_1", 0),
        )
        .await;
    assert_eq!(
        (
            dup.status,
            dup.body["duplicate"].as_bool(),
            dup.body["id"].as_str()
        ),
        (200, Some(true), Some(first.as_str())),
        "{dup:?}"
    );
    relay
        .post(
            "/hooks/k_orders",
            &[JSON, ("x-delivery", "evt_1")],
            body("evt_1", 0),
        )
        .await
        .id();

    // Live: the answers while the job runs.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no answer arrived while a purge ran"
        );
        let id = start_purge(&api).await;
        let resend = relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-delivery", "evt_1")],
                body("evt_1", 0),
            )
            .await;
        let new = relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-delivery", "evt_new")],
                body("evt_new", 0),
            )
            .await;
        let held = relay.post("/hooks/d_review", &[JSON], body("q", 0)).await;
        let keeper = relay
            .post(
                "/hooks/k_orders",
                &[JSON, ("x-delivery", "evt_2")],
                body("evt_2", 0),
            )
            .await;
        let during = api.job(id).await["state"] == "running";
        assert_eq!(keeper.status, 200, "another tenant's hook: {keeper:?}");
        let done = job_ended(&api, id).await;
        assert_eq!(done["state"], "done", "{done}");
        if during {
            assert_purge_refusal("a resend of a stored hook", &resend);
            assert_purge_refusal("a new hook", &new);
            assert_purge_refusal("a hook held in quarantine", &held);
            break;
        }
        // The purge ended first: the tenant has nothing; start again.
        post_new(&relay, "evt_1").await;
    }
    // After the purge: the provider's retry is a new hook.
    let after = post_new(&relay, "evt_1").await;
    assert_ne!(after, first);

    // Restart mid-purge: SIGKILL while the job runs, the store still has the
    // mark and the dedupe record; the restarted relay refuses the resend.
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no answer arrived while a resumed purge ran"
        );
        let id = start_purge(&api).await;
        relay.kill();
        let (marked, recorded) = {
            let kv = open_store(&relay);
            let marks = ankusa_queue::read_purges(&kv).expect("purges");
            let ord = marks.keys().next().copied();
            let recorded = ord.is_some_and(|o| {
                kv.scan(
                    Cf::Index,
                    &ankusa_keys::tenant_range(ankusa_keys::Family::Dedupe, o),
                    Direction::Forward,
                    10,
                )
                .expect("scan")
                .len()
                    == 1
            });
            (!marks.is_empty(), recorded)
        };
        relay.restart().await;
        let resend = relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-delivery", "evt_1")],
                body("evt_1", 0),
            )
            .await;
        let during = api.job(id).await["state"] == "running";
        let done = job_ended(&api, id).await;
        assert_eq!(done["state"], "done", "{done}");
        if marked && recorded && during {
            assert_purge_refusal("a resend after a restart mid-purge", &resend);
            break;
        }
        if resend.status == 200 {
            continue; // taken after the purge ended: the tenant has evt_1 again
        }
        post_new(&relay, "evt_1").await;
    }
    stop(&mut relay).await;
    assert_clean(&open_store(&relay));
}

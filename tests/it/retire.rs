//! Retiring a source (docs/design.md section 5, "Retire a source"): its queued
//! rows are dead-lettered and other sources are untouched.

use std::time::Duration;

use serde_json::Value;

use crate::admin::{Admin, cli, validate};
use crate::keyed::{KEYS, assert_clean, body, open_store, stop};
use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);

const JSON: (&str, &str) = ("content-type", "application/json");

/// A retired source (docs/design.md section 5, "Retire a source"): its lane
/// members and due rows are dead-lettered by a job, its lane heads in flight
/// are left to the pipeline, which dead-letters them when their attempt
/// fails; the job ends once no call of the source is out. Every row of the
/// source is then in the DLQ with the reason; the other source of the tenant
/// delivered everything and has no dead letter; the store's invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_sources_queued_rows_are_dead_lettered_and_other_sources_untouched() {
    let sink = Sink::start(|r| match r.path.as_str() {
        "/in" => Reply::HoldThen(503),
        "/inf" => Reply::Status(503),
        _ => Reply::Status(200),
    })
    .await;
    let url = sink.url();
    let mut relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "
retry: {{base_ms: 60000, max_ms: 60000}}
breaker: {{failures: 100000, open_ms: 10}}
tenants: [{{name: default}}]
sources:
  - name: old
    tenant: default
    sinks:
      - {{type: http, name: ledger, url: '{url}', timeout_ms: 120000, ordered: true, ordering_key: {{header: x-entity-id}}}}
      - {{type: http, name: flaky, url: '{url}f'}}
  - name: new
    tenant: default
    sinks: [{{type: http, name: web, url: '{url}n'}}]
"
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);
    let admin = format!("http://{}", relay.admin);
    for i in 0..30 {
        let key = KEYS[i % 3];
        relay
            .post("/hooks/old", &[JSON, ("x-entity-id", key)], body(key, i))
            .await
            .id();
    }
    for i in 0..5 {
        relay.post("/hooks/new", &[JSON], body("n", i)).await.id();
    }
    until(
        "three lane heads held, every flaky row tried",
        WAIT,
        async || {
            let c = api.tenant("default").await["counters"].clone();
            let flaky = sink.requests().iter().filter(|r| r.path == "/inf").count();
            (c["in_flight"].as_u64() >= Some(3)
                && c["lane_members"] == 27
                && flaky >= 30
                && sink.delivered().len() == 5)
                .then_some(())
        },
    )
    .await;

    let (code, _, _) = cli(&["retire-source", "old", "--admin", &admin], None);
    assert_eq!(code, 2, "without --yes");
    let (code, out, err) = cli(
        &[
            "retire-source",
            "old",
            "--yes",
            "--reason",
            "retired: provider gone",
            "--json",
            "--admin",
            &admin,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job");
    validate("POST", "/v1/jobs", 202, &job);
    assert_eq!(
        (job["kind"].as_str(), job["filter"]["reason"].as_str()),
        (Some("dead_letter_source"), Some("retired: provider gone"))
    );
    let id = job["id"].as_u64().expect("id");
    let waiting = until(
        "the job waiting for the source's calls in flight",
        WAIT,
        async || {
            let j = api.job(id).await;
            (j["phase"] == "waiting for calls in flight").then_some(j)
        },
    )
    .await;
    assert_eq!(waiting["state"], "running");
    // Members and due rows are dead; the three heads are still out.
    let c = until("only the held heads out", WAIT, async || {
        let c = api.tenant("default").await["counters"].clone();
        (c["in_flight"] == 3).then_some(c)
    })
    .await;
    assert_eq!(
        (c["lane_members"].as_i64(), c["lanes"].as_i64()),
        (Some(0), Some(3)),
        "{c}"
    );
    assert_eq!(
        api.job(id).await["state"],
        "running",
        "the job ended with calls of the source out"
    );
    // Hooks of the source received while it is retired: the pipeline
    // dead-letters their due rows (a new lane's head and the flaky rows) with
    // the job's reason, and the job counts them in its `done`.
    for i in 30..35 {
        relay
            .post(
                "/hooks/old",
                &[JSON, ("x-entity-id", "cus_z")],
                body("cus_z", i),
            )
            .await
            .id();
    }
    until(
        "the new hooks' rows dead-lettered by the pipeline",
        WAIT,
        async || {
            let c = api.tenant("default").await["counters"].clone();
            (c["dead"] == 67 && c["in_flight"] == 3).then_some(())
        },
    )
    .await;
    sink.release();
    let done = until("the job done", WAIT, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await;
    assert_eq!(done["state"], "done", "{done}");
    // Every row dead-lettered for the retirement: 27 members and 30 flaky
    // rows by the job's pages, the 3 heads whose attempts failed and the 10
    // rows of the later hooks by the pipeline.
    assert_eq!(done["done"].as_u64(), Some(70), "{done}");
    assert_eq!(
        done["phase"],
        Value::Null,
        "a done job does nothing now: {done}"
    );
    until("nothing pending", WAIT, async || {
        (api.tenant("default").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let dead = api.dead("source=old&limit=1000").await;
    assert_eq!(dead.len(), 70, "every row of the retired source is dead");
    assert!(
        dead.iter().all(|d| d["reason"] == "retired: provider gone"),
        "{dead:?}"
    );
    let ledger: Vec<&Value> = dead.iter().filter(|d| d["sink"] == "ledger").collect();
    assert_eq!(ledger.len(), 35);
    assert_eq!(api.dead("source=new").await.len(), 0);
    let c = api.tenant("default").await["counters"].clone();
    assert_eq!(
        (
            c["dead"].as_i64(),
            c["delivered_total"].as_i64(),
            c["lanes"].as_i64(),
            c["in_flight"].as_i64()
        ),
        (Some(70), Some(5), Some(0), Some(0)),
        "{c}"
    );
    assert_eq!(
        sink.requests().iter().filter(|r| r.path == "/in").count(),
        3,
        "a lane member of the retired source was delivered"
    );
    let src = api
        .ok("GET", "/v1/sources/{source}", "/v1/sources/new", None)
        .await;
    assert_eq!(src["paused"], false);
    stop(&mut relay).await;
    assert_clean(&open_store(&relay));
}
